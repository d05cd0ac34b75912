"""gres/mps=N is N of a GPU's MPS units, which the node's gres.conf sets (Gres=gpu:a100:4,mps:800
is 200 per GPU): the daemon's records, the usage seeded from sacct and the simulator's job
views all read it by the units per GPU of the nodes the job may use, not as a percent."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_hase.daemon.cycle import CycleConfig, JobEstimate
from slurm_hase.daemon.fake import FakeBackend, gpu_node
from slurm_hase.daemon.loop import Daemon, LoopSettings
from slurm_hase.daemon.state import StateCache, build_state
from slurm_hase.policy.types import ClusterState, Decision
from slurm_hase.slurm.types import AccountingRecord, GpuRequest, Job, JobState, Node
from slurm_hase.store.state import StateStore


class Est:
    repeatable = True

    def estimate(self, job: Job, types: Sequence[str]) -> JobEstimate:
        return JobEstimate({t: 1000.0 for t in types})


def mps_job(job_id: str, mps: int, gpu_type: str | None = None, **kw: object) -> Job:
    return Job(job_id=job_id, name="j", user="u", account="a", partition="gpu",
               state=JobState.PENDING, gpu=GpuRequest(0, gpu_type, "node", mps), submit_time=1,
               **kw)  # type: ignore[arg-type]


def state(jobs: Sequence[Job], nodes: Sequence[Node], cache: StateCache | None = None
          ) -> ClusterState:
    return build_state(jobs, nodes, Est(), {}, {}, 5000.0, CycleConfig(), cache=cache)


def fractions(st: ClusterState) -> dict[str, float]:
    return {**{p.job_id: p.gpu_fraction for p in st.pending},
            **{r.job_id: r.gpu_fraction for r in st.running}}


def test_a_pinned_pending_job_is_read_by_its_types_units() -> None:
    nodes = [gpu_node("a1", "a100", mps=800), gpu_node("t1", "t4", mps=400)]
    st = state([mps_job("1", 100, "a100"), mps_job("2", 100, "t4")], nodes)
    assert fractions(st) == {"1": 0.5, "2": 1.0}


def test_an_unpinned_pending_job_uses_the_units_its_mps_pools_share() -> None:
    agree = [gpu_node("a1", "a100", mps=800), gpu_node("v1", "v100", mps=800)]
    assert fractions(state([mps_job("1", 100)], agree)) == {"1": 0.5}
    # a pool without an MPS count cannot run an MPS job: it does not count
    some = [gpu_node("a1", "a100", mps=800), gpu_node("t1", "t4")]
    assert fractions(state([mps_job("1", 100)], some)) == {"1": 0.5}


def test_pools_that_disagree_give_the_largest_share() -> None:
    """200 and 400 units per GPU: 100 units are half a GPU on one, a quarter on the other; the
    record says half (never less than the job takes wherever it lands)."""
    nodes = [gpu_node("a1", "a100", mps=800), gpu_node("v1", "v100", mps=1600)]
    assert fractions(state([mps_job("1", 100)], nodes)) == {"1": 0.5}


def test_the_partitions_types_decide_for_an_unpinned_job() -> None:
    nodes = [gpu_node("a1", "a100", mps=800), gpu_node("v1", "v100", mps=1600, partition="big")]
    jobs = [mps_job("1", 100), replace(mps_job("2", 100), partition="big")]
    assert fractions(state(jobs, nodes)) == {"1": 0.5, "2": 0.25}


def test_a_running_job_is_read_by_its_allocated_types_units() -> None:
    nodes = [gpu_node("a1", "a100", mps=800, alloc=1), gpu_node("t1", "t4", mps=400)]
    run = replace(mps_job("9", 100), state=JobState.RUNNING, alloc_gpus={"a100": 1},
                  start_time=4000, time_limit_s=3600)
    assert fractions(state([run], nodes)) == {"9": 0.5}


def test_a_cached_record_follows_a_change_of_the_nodes_mps_count() -> None:
    """The same Job objects and a repeatable estimator: the cached entries stand unless the
    units per GPU are part of what is compared."""
    cache = StateCache()
    pend = mps_job("1", 100, "a100")
    run = replace(mps_job("9", 100), state=JobState.RUNNING, alloc_gpus={"a100": 1},
                  start_time=4000, time_limit_s=3600)
    before = [gpu_node("a1", "a100", mps=400, alloc=1)]
    assert fractions(state([pend, run], before, cache)) == {"1": 1.0, "9": 1.0}
    after = [gpu_node("a1", "a100", mps=800, alloc=1)]
    assert fractions(state([pend, run], after, cache)) == {"1": 0.5, "9": 0.5}
    assert state([pend, run], after, cache) == state([pend, run], after)


class Clock:
    def now(self) -> float:
        return 10_000.0


def test_usage_seeded_from_sacct_reads_mps_by_the_nodes_units(tmp_path: Path) -> None:
    """An hour of gres/mps=100 on a node with 200 units per GPU is half a GPU-hour."""
    rec = AccountingRecord("5", "j", "a", "u", JobState.COMPLETED, start_time=5_000,
                           end_time=8_600, alloc_tres={"gres/mps": "100"}, nodes="a1")
    fb = FakeBackend([], [gpu_node("a1", "a100", mps=800)])
    fb.records = [rec]
    d = Daemon(fb, _NoPolicy(), Est(), Clock(), StateStore(":memory:"), CycleConfig(),
               LoopSettings(half_life_s=1e12), shares={"a": 1.0})
    assert d.ledger.usage()["a"] == pytest.approx(0.5 * 3600, rel=1e-6)


class _NoPolicy:
    name, summary = "none", ""

    def decide(self, state: ClusterState) -> list[Decision]:
        return []


def test_the_simulators_job_view_asks_in_its_nodes_units(fixtures_dir: Path) -> None:
    """A half-GPU trace job on a cluster with 200 MPS units per GPU asks for gres/mps:100,
    and the daemon's record of it says half a GPU, as the simulator books it."""
    from slurm_hase.sim.cluster import uniform_cluster
    from slurm_hase.sim.simslurm import SimSlurm
    from slurm_hase.sim.throughput import load_throughputs
    from slurm_hase.sim.traces import TraceJob

    table = load_throughputs(fixtures_dir / "sim" / "gavel_throughputs_excerpt.json")
    base = uniform_cluster({"v100": 4})
    spec = replace(base, nodes=tuple(replace(n, mps=200) for n in base.nodes))
    sim = SimSlurm(spec, table)
    sim.add(TraceJob("1", 0.0, "a", "a", 1, 1000.0, 0.5, "ResNet-50 (batch size 64)"), 0.0)
    (job,) = sim.jobs()
    assert job.gpu is not None and job.gpu.mps == 100 and job.tres_per_node == "gres/mps:100"
    assert fractions(state(sim.jobs(), sim.nodes())) == {"1": 0.5}


def test_a_running_simulated_share_is_read_as_the_simulator_books_it(fixtures_dir: Path) -> None:
    """Types whose MPS counts differ (k80 200 per GPU, v100 100): an unpinned half-GPU job asks
    for 50 units (the largest share, v100's), and once it runs on a k80 its view asks for
    that type's 100 units, so the daemon's running record is the half GPU the simulator books."""
    from slurm_hase.sim.cluster import uniform_cluster
    from slurm_hase.sim.simslurm import SimSlurm
    from slurm_hase.sim.throughput import load_throughputs
    from slurm_hase.sim.traces import TraceJob

    table = load_throughputs(fixtures_dir / "sim" / "gavel_throughputs_excerpt.json")
    base = uniform_cluster({"k80": 4, "v100": 4})
    spec = replace(base, nodes=tuple(replace(n, mps=200 if n.gpu_type == "k80" else 100)
                                     for n in base.nodes))
    sim = SimSlurm(spec, table)
    job = sim.add(TraceJob("1", 0.0, "a", "a", 1, 1000.0, 0.5, "ResNet-50 (batch size 64)"), 0.0)
    (view,) = sim.jobs()
    assert view.gpu is not None and view.gpu.mps == 50
    assert fractions(state(sim.jobs(), sim.nodes())) == {"1": 0.5}
    sim.start(job, "k80", 0.0)
    (view,) = sim.jobs()
    assert view.gpu is not None and view.gpu.mps == 100 and view.tres_per_node == "gres/mps:100"
    assert fractions(state(sim.jobs(), sim.nodes())) == {"1": 0.5}


def test_pool_mps_capacity_counts_the_gpus_of_nodes_with_an_mps_count() -> None:
    """Two a100 nodes of 4 GPUs, one with mps:800 (200 per GPU): the pool's MPS units per GPU
    are 200, not 800 over all 8 GPUs (100)."""
    nodes = [gpu_node("a1", "a100", mps=800), gpu_node("a2", "a100")]
    st = state([mps_job("1", 100)], nodes)
    assert st.pools["a100"].mps_capacity == 200
    assert fractions(st) == {"1": 0.5}
    assert state([], [gpu_node("a3", "a100")]).pools["a100"].mps_capacity == 100  # no count
