"""A pending job may only use the GPU types of its own partition(s): build_state keeps only
those in its PendingJob's runtime_s, so no policy routes it to a type it cannot get (the safety
layer would drop that constraint: "no usable node satisfies ...")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from slurm_hase.daemon.cycle import CycleConfig, JobEstimate, build_state, run_cycle
from slurm_hase.daemon.fake import FakeBackend, gpu_node
from slurm_hase.daemon.state import StateCache, _cache_for, _types_for
from slurm_hase.policy.registry import make_policy
from slurm_hase.policy.types import ClusterState
from slurm_hase.policy.usage import UsageLedger
from slurm_hase.slurm.types import Job, Node
from tests.unit.test_daemon_cycle import Clock, TableEstimator, pjob

ALL = {"a100", "v100", "t4"}
# partition gpu: a100, v100, t4; partition debug: t4 only (as the local cluster)
NODES = [gpu_node("a1", "a100"), gpu_node("v1", "v100"), gpu_node("t1", "t4"),
         gpu_node("d1", "t4", partition="debug")]


class Repeatable(TableEstimator):
    """TableEstimator that says its answer for the same Job object never changes."""

    repeatable = True


class Asked(TableEstimator):
    """TableEstimator that remembers the GPU types it was asked about, per job."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: dict[str, tuple[str, ...]] = {}

    def estimate(self, job: Job, gpu_types: Sequence[str]) -> JobEstimate | None:
        self.asked[job.job_id] = tuple(gpu_types)
        return super().estimate(job, gpu_types)


def _types(state: ClusterState) -> dict[str, set[str]]:
    return {p.job_id: set(p.runtime_s) for p in state.pending}


def _state(jobs: Sequence[Job], nodes: Sequence[Node], cfg: CycleConfig | None = None,
           cache: StateCache | None = None, est: TableEstimator | None = None
           ) -> ClusterState:
    return build_state(jobs, nodes, est or TableEstimator(), {}, {}, 1000.0,
                       cfg or CycleConfig(), cache=cache)


def test_types_for_partition_strings() -> None:
    types = ("a100", "t4", "v100")
    part_types = {"gpu": frozenset(ALL), "debug": frozenset({"t4"}),
                  "old": frozenset({"v100", "k80"})}
    assert _types_for("gpu", types, part_types) is types
    assert _types_for("debug", types, part_types) == ("t4",)
    assert _types_for("debug,old", types, part_types) == ("t4", "v100")
    assert _types_for("debug,gpu", types, part_types) is types
    assert _types_for("debug,nowhere", types, part_types) == ("t4",)
    # a partition with no usable GPU node (or none given): not restricted, as before
    assert _types_for("nowhere", types, part_types) is types
    assert _types_for("", types, part_types) is types


@pytest.mark.parametrize("cached", [False, True])
def test_debug_job_gets_only_t4_gpu_job_keeps_all(cached: bool) -> None:
    jobs = [pjob("1", partition="gpu"), pjob("2", partition="debug"),
            pjob("3", partition="debug,gpu"), pjob("4", partition="nowhere"),
            pjob("5", partition="debug", typed="a100")]
    est = Asked()
    st = _state(jobs, NODES, cache=StateCache() if cached else None, est=est)
    assert set(st.pools) == ALL
    got = _types(st)
    assert got["1"] == ALL and got["3"] == ALL
    assert got["2"] == {"t4"}
    assert got["4"] == ALL  # unknown partition: as before
    # pinned to a type its partition lacks: only t4 is known for it (Slurm will not run it)
    assert got["5"] == {"t4"}
    by_id = {p.job_id: p for p in st.pending}
    assert by_id["5"].pinned_type == "a100"
    assert by_id["2"].runtime_s == {"t4": 300.0}
    assert est.asked["2"] == ("t4",)  # the estimator is asked about those types only
    assert set(est.asked["1"]) == ALL


def test_single_partition_cluster_is_not_restricted() -> None:
    """Every partition holds every type (the simulator's case): no per-job lookups at all."""
    nodes = [gpu_node("a1", "a100"), gpu_node("v1", "v100", partition="gpu"),
             gpu_node("t1", "t4")]
    cache = StateCache()
    st = _state([pjob("1"), pjob("2", partition="gpu,other")], nodes, cache=cache)
    assert _types(st) == {"1": ALL, "2": ALL}
    assert cache.job_types is None
    assert all(cache.pending[j][2] is cache.types for j in ("1", "2"))


def test_config_gpu_types_leave_a_job_without_usable_type_alone() -> None:
    cfg = CycleConfig(gpu_types=("a100", "v100"))
    st = _state([pjob("1"), pjob("2", partition="debug")], NODES, cfg)
    assert _types(st) == {"1": {"a100", "v100"}}  # debug has only t4: no record, as no estimate


def test_down_nodes_do_not_count() -> None:
    nodes = [*NODES, gpu_node("d2", "v100", partition="debug", state="DOWN")]
    st = _state([pjob("2", partition="debug")], nodes)
    assert _types(st) == {"2": {"t4"}}
    # every node of debug down: debug is unknown, the job is not restricted (as before)
    nodes = [*NODES[:3], gpu_node("d1", "t4", partition="debug", state="DOWN")]
    st = _state([pjob("2", partition="debug")], nodes)
    assert _types(st) == {"2": ALL}


@pytest.mark.parametrize("estimator", [TableEstimator, Repeatable])
def test_cache_follows_partition_moves_and_node_changes(estimator: type[TableEstimator]) -> None:
    """Cycle after cycle with one StateCache: the same as without it, a job moved to another
    partition (scontrol update Partition=...) or a partition that gains or loses a type is
    re-evaluated, and an unchanged job in an unchanged partition keeps its record."""
    cache = StateCache()
    j1, j2, j3 = pjob("1", partition="gpu"), pjob("2", partition="debug"), pjob("3")
    debug_a100 = gpu_node("d9", "a100", partition="debug")
    rounds: list[tuple[list[Job], list[Node], dict[str, set[str]]]] = [
        ([j1, j2, j3], NODES, {"1": ALL, "2": {"t4"}, "3": ALL}),
        ([j1, j2, j3], NODES, {"1": ALL, "2": {"t4"}, "3": ALL}),  # the very same objects
        # job 2 moved to gpu, job 1 to debug (new Job objects, as a real backend gives)
        ([replace(j1, partition="debug"), replace(j2, partition="gpu"), j3], NODES,
         {"1": {"t4"}, "2": ALL, "3": ALL}),
        # the same Job objects as first, node objects rebuilt with an allocation
        ([j1, j2, j3], [gpu_node("a1", "a100", alloc=2), *NODES[1:]],
         {"1": ALL, "2": {"t4"}, "3": ALL}),
        # debug gains an a100 node: job 2 may use a100 too
        ([j1, j2, j3], [*NODES, debug_a100], {"1": ALL, "2": {"a100", "t4"}, "3": ALL}),
        # ... and loses it again
        ([j1, j2, j3], NODES, {"1": ALL, "2": {"t4"}, "3": ALL}),
        # the a100 node of gpu goes down: a100 is only in debug, gpu jobs lose it
        ([j1, j2, j3], [gpu_node("a1", "a100", state="DOWN"), *NODES[1:], debug_a100],
         {"1": {"v100", "t4"}, "2": {"a100", "t4"}, "3": {"v100", "t4"}}),
        ([j1, j2, j3], NODES, {"1": ALL, "2": {"t4"}, "3": ALL}),
    ]
    for jobs, nodes, want in rounds:
        cached = build_state(jobs, nodes, estimator(), {}, {}, 1000.0, CycleConfig(),
                             cache=cache)
        plain = build_state(jobs, nodes, estimator(), {}, {}, 1000.0, CycleConfig())
        assert cached == plain
        assert _types(cached) == want


def test_unchanged_jobs_keep_their_records_across_node_changes() -> None:
    """Node objects rebuilt (allocations move) without a partition's types changing: the
    per-partition types stay the very same objects, so a repeatable estimator is not asked
    again and every record is reused."""
    cache = StateCache()
    jobs = [pjob("1"), pjob("2", partition="debug")]
    est = Repeatable()
    first = build_state(jobs, NODES, est, {}, {}, 1000.0, CycleConfig(), cache=cache)
    asked = est.calls
    debug_types = cache.pending["2"][2]
    assert debug_types == ("t4",)
    for alloc in (1, 2, 3):
        nodes = [gpu_node("a1", "a100", alloc=alloc), *NODES[1:3],
                 gpu_node("d1", "t4", partition="debug", alloc=alloc)]
        again = build_state(jobs, nodes, est, {}, {}, 1000.0, CycleConfig(), cache=cache)
        assert cache.pending["2"][2] is debug_types
        assert again.pending[1] is first.pending[1] and again.pending[0] is first.pending[0]
    assert est.calls == asked


@pytest.mark.parametrize("policy", ["fair", "hase", "gavel"])
def test_cycle_never_routes_a_debug_job_to_a_type_debug_lacks(policy: str) -> None:
    """run_cycle with all partitions managed: the debug jobs are constrained to t4 or left
    unconstrained, never planned with a100/v100 nor skipped for lack of a usable node; a job
    moved from debug to gpu is routed over all types on the next cycle."""
    jobs = [pjob(str(i), partition="debug" if i % 2 else "gpu", account="ab"[i % 2])
            for i in range(1, 13)]
    fb = FakeBackend(jobs, NODES)
    cache = _cache_for(fb)  # run_cycle keeps one StateCache per backend
    for cycle in range(2):
        res = run_cycle(fb, make_policy(policy), TableEstimator(), Clock(1000.0 + cycle),
                        UsageLedger(3600.0), {"a": 1.0, "b": 1.0}, CycleConfig(dry_run=True))
        assert not [n for _, n in res.skipped if "no usable node satisfies" in n]
        routed = [(jid, upd) for jid, upd in res.planned if upd.features and int(jid) % 2]
        assert routed, res.planned  # every policy routes some debug job
        for jid, upd in routed:
            assert set(upd.features.split("|")) <= {"t4"}, (jid, upd)
        assert set(cache.pending["1"][3].runtime_s) == {"t4"}
        assert set(cache.pending["2"][3].runtime_s) == ALL
    # job 1 moved to gpu: now a job like the gpu ones
    fb.job_list[0] = replace(fb.job_list[0], partition="gpu")
    res = run_cycle(fb, make_policy(policy), TableEstimator(), Clock(1100.0),
                    UsageLedger(3600.0), {"a": 1.0, "b": 1.0}, CycleConfig(dry_run=True))
    assert not [n for _, n in res.skipped if "no usable node satisfies" in n]
    assert set(cache.pending["1"][3].runtime_s) == ALL
