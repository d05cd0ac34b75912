"""GPUs that MPS shares and shards hold, read from GresUsed, and the running jobs holding them.

Captures (tests/fixtures/slurm/capture-gres-used.sh, Slurm 22.05 and 24.11, the same jobs):
main cluster: a100-1 runs mps:50 + mps:30 (one GPU) beside 2 whole GPUs, t4-1 runs mps:60 (a
second mps:60 for t4-1 pends: Slurm shares one GPU a node through MPS), v100-1 4 whole GPUs;
shard cluster (8 shards a GPU): a100-1 runs shard:4 + shard:4 (one GPU), shard:6 (a second)
and 1 whole GPU, v100-1 mps:50.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_hase.daemon.cycle import CycleConfig, JobEstimate
from slurm_hase.daemon.records import share_on_its_gpus
from slurm_hase.daemon.state import build_state
from slurm_hase.policy.hase import Timeline
from slurm_hase.policy.registry import make_policy
from slurm_hase.policy.types import ClusterState
from slurm_hase.slurm.gres_used import gpus_in_use
from slurm_hase.slurm.parse_json import parse_squeue_json
from slurm_hase.slurm.parse_json_nodes import parse_sinfo_json
from slurm_hase.slurm.parse_text import parse_scontrol_nodes
from slurm_hase.slurm.types import GpuRequest, Job, JobState, Node

VERSIONS = ("22.05", "24.11")
MAIN = {"a100-1": {"a100": 3}, "a100-2": {}, "t4-1": {"t4": 1}, "t4-2": {}, "v100-1": {"v100": 4},
        "v100-2": {}}
SHARD = {"a100-1": {"a100": 3}, "v100-1": {"v100": 1}}
BARE_MAIN = {"a100-1": {"a100": 2}, "t4-1": {}}  # AllocTRES alone: the share GPUs read free
BARE_SHARD = {"a100-1": {"a100": 1}, "v100-1": {}}


def _text(fixtures_dir: Path, v: str, name: str) -> str:
    return (fixtures_dir / "slurm" / f"local-{v}" / name).read_text()


@pytest.mark.parametrize("v", VERSIONS)
@pytest.mark.parametrize(("prefix", "expected"), [("", MAIN), ("shard-", SHARD)])
def test_a_gpu_held_any_way_is_in_use(fixtures_dir: Path, v: str, prefix: str,
                                      expected: dict[str, dict[str, int]]) -> None:
    raw = _text(fixtures_dir, v, f"{prefix}scontrol-show-node-gres-used.txt")
    got = {n.name: n.gpus_alloc for n in parse_scontrol_nodes(raw)}
    assert got == expected
    # control: the same lines without GresUsed (scontrol without -d) count whole GPUs only
    bare = {n.name: n.gpus_alloc for n in parse_scontrol_nodes(re.sub(r" GresUsed=\S+", "", raw))}
    assert bare == {**expected, **(BARE_MAIN if prefix == "" else BARE_SHARD)}


def test_the_two_releases_write_shares_differently(fixtures_dir: Path) -> None:
    old = _text(fixtures_dir, "22.05", "scontrol-show-node-gres-used.txt")
    new = _text(fixtures_dir, "24.11", "scontrol-show-node-gres-used.txt")
    assert "mps:a100:1(IDX:0)" in old
    assert "mps:a100:80(80/100,0/100,0/100,0/100)" in new


@pytest.mark.parametrize(("text", "expected"), [
    ("gpu:a100:2(IDX:1-2),mps:a100:1(IDX:0)", {"a100": 3}),
    ("gpu:a100:1(IDX:2),shard:a100:14(8/8,6/8,0/8,0/8)", {"a100": 3}),
    ("gpu:a100:1(IDX:0),mps:a100:50(50/100,0/100,0/100,0/100)", {"a100": 1}),  # same GPU
    ("gpu:a100:0(IDX:N/A),mps:a100:0(IDX:N/A)", {}),
    ("gpu:a100:0(IDX:N/A),mps:a100:0(0/100,0/100,0/100,0/100)", {}),
    ("gpu:a100:1(IDX:1),mps:0,shard:a100:1(IDX:0)", {"a100": 2}),  # 22.05 sinfo --json
    ("gpu:a100:2(IDX:0,3),mps:1(IDX:1)", {"a100": 3}),  # untyped share: the node's one type
    ("gpu:a100:4(IDX:0-3),mps:a100:1(IDX:7)", {"a100": 4}),  # never more than the node has
])
def test_gpus_in_use(text: str, expected: dict[str, int]) -> None:
    assert gpus_in_use(text, {"a100": 4}) == expected


@pytest.mark.parametrize("text", [None, "", "(null)", "gpu:a100:2", "gpu:a100:2(S:0)"])
def test_no_indices_leaves_alloc_tres_to_count(text: str | None) -> None:
    assert gpus_in_use(text, {"a100": 4}) is None


def test_an_untyped_share_on_a_node_of_two_types_is_left_out() -> None:
    got = gpus_in_use("gpu:a100:1(IDX:0),gpu:t4:0(IDX:N/A),mps:1(IDX:2)", {"a100": 2, "t4": 2})
    assert got == {"a100": 1}


@pytest.mark.parametrize("v", VERSIONS)
def test_sinfo_json_counts_the_gpu_a_share_holds(fixtures_dir: Path, v: str) -> None:
    """The session-1 captures: run-a100 (1 GPU) and run-mps (mps:50) on a100-1."""
    nodes = {n.name: n for n in parse_sinfo_json(
        (fixtures_dir / "slurm" / v / "sinfo.json").read_text())}
    assert nodes["a100-1"].gpus_alloc == {"a100": 2}


def _state(fixtures_dir: Path, v: str, prefix: str) -> tuple[ClusterState, float]:
    jobs = parse_squeue_json(_text(fixtures_dir, v, f"{prefix}squeue-gres-used.json"))
    nodes = parse_scontrol_nodes(_text(fixtures_dir, v, f"{prefix}scontrol-show-node-gres-used.txt"))
    now = max(j.start_time or 0 for j in jobs) + 10.0

    class NoEstimate:
        def estimate(self, job: Job, types: object) -> None:
            return None

    return build_state(jobs, nodes, NoEstimate(), {}, {}, now, CycleConfig()), now


@pytest.mark.parametrize("v", VERSIONS)
def test_running_shares_are_running_jobs_on_their_gpu(fixtures_dir: Path, v: str) -> None:
    state, now = _state(fixtures_dir, v, "")
    assert {k: (p.total_gpus, p.free_gpus) for k, p in state.pools.items()} == {
        "a100": (8, 5), "t4": (8, 7), "v100": (8, 4)}
    shares = sorted((r.gpu_type, r.num_gpus, r.gpu_fraction) for r in state.running
                    if r.gpu_fraction < 1.0)
    assert shares == [("a100", 1, 0.3), ("a100", 1, 0.5), ("t4", 1, 0.6)]
    # HASE's timeline: the share GPUs' spare is what their MPS jobs leave
    spare = Timeline(state.pools, state.running, now).mps_spare
    assert spare == {"a100": pytest.approx(0.2), "t4": pytest.approx(0.4), "v100": 0.0}


@pytest.mark.parametrize("v", VERSIONS)
def test_a_shard_job_is_read_as_its_part_of_a_gpu(fixtures_dir: Path, v: str) -> None:
    state, now = _state(fixtures_dir, v, "shard-")
    assert {k: (p.total_gpus, p.free_gpus) for k, p in state.pools.items()} == {
        "a100": (4, 1), "v100": (4, 3)}
    shares = sorted((r.gpu_type, r.gpu_fraction) for r in state.running if r.gpu_fraction < 1)
    assert shares == [("a100", 0.5), ("a100", 0.5), ("a100", 0.75), ("v100", 0.5)]
    assert Timeline(state.pools, state.running, now).mps_spare["a100"] == pytest.approx(0.25)


NODE = Node("n1", "MIXED", gpus={"a100": 4}, shard_total=32)
RUNNING = Job(job_id="1", name="j", user="u", account="a", partition="gpu",
              state=JobState.RUNNING, priority=1, nodes="n1")


@pytest.mark.parametrize(("job", "nodes", "why"), [
    (RUNNING, {"n1": NODE}, "no share asked"),
    (replace(RUNNING, nodes="n9", tres_per_node="gres:shard:4"),
     {"n1": NODE}, "unknown node"),
    (replace(RUNNING, gpu=GpuRequest(0, None, "node", 50)),
     {"n1": Node("n1", "MIXED", gpus={"a100": 2, "t4": 2})}, "two GPU types"),
    (replace(RUNNING, nodes="", gpu=GpuRequest(0, None, "node", 50)),
     {"n1": NODE}, "no node yet"),
])
def test_share_on_its_gpus_needs_a_node_of_one_type(job: Job, nodes: dict[str, Node],
                                                     why: str) -> None:
    assert share_on_its_gpus(job, nodes, {}) is None, why


def test_share_on_its_gpus_reads_shards_in_the_types_mps_units() -> None:
    job = replace(RUNNING, tres_per_node="gres/shard:6")
    got = share_on_its_gpus(job, {"n1": NODE}, {"a100": 200})
    assert got is not None
    assert (got.alloc_gpus, got.gpu) == ({"a100": 1}, GpuRequest(0, None, "node", 150))


class _Runtimes:
    """Every job 600 s on every type it may use; the types it was asked about are kept."""

    def __init__(self) -> None:
        self.asked: dict[str, tuple[str, ...]] = {}

    def estimate(self, job: Job, types: Sequence[str]) -> JobEstimate:
        self.asked[job.job_id] = tuple(types)
        return JobEstimate({t: 600.0 for t in types})


@pytest.mark.parametrize("v", VERSIONS)
def test_a_pending_shard_job_is_planned_on_the_types_with_shards(fixtures_dir: Path,
                                                                 v: str) -> None:
    """The shard cluster's nodes (a100-1: 32 shards, 8 a GPU; v100-1: MPS only) with its
    running jobs: a pending shard:4 job is half a GPU that only the A100s can give, and the
    policy constrains it there; a pending CPU-only job still gets no record."""
    jobs = parse_squeue_json(_text(fixtures_dir, v, "shard-squeue-gres-used.json"))
    nodes = parse_scontrol_nodes(_text(fixtures_dir, v, "shard-scontrol-show-node-gres-used.txt"))
    now = max(j.start_time or 0 for j in jobs) + 10.0
    base = Job(job_id="900", name="wants-shards", user="root", account="teamb", partition="gpu",
               state=JobState.PENDING, submit_time=int(now) - 60,
               tres_per_node="gres/shard:4" if v == "24.11" else "gres:shard:4")
    cpu = replace(base, job_id="901", tres_per_node="")
    est = _Runtimes()
    state = build_state([*jobs, base, cpu], nodes, est, {}, {}, now, CycleConfig())
    (pj,) = [p for p in state.pending]
    assert (pj.job_id, pj.num_gpus, pj.gpu_fraction, set(pj.runtime_s)) == ("900", 1, 0.5,
                                                                            {"a100"})
    assert est.asked["900"] == ("a100",) and "901" not in est.asked
    decision = {d.job_id: d for d in make_policy("hase").decide(state)}["900"]
    assert decision.gpu_types == ("a100",)


def test_the_cycle_constrains_a_pending_shard_job_and_leaves_a_cpu_job() -> None:
    from slurm_hase.daemon.cycle import run_cycle
    from slurm_hase.daemon.fake import FakeBackend
    from slurm_hase.policy.usage import UsageLedger

    nodes = [Node("a100-1", "IDLE", features=("a100",), partitions=("gpu",), gpus={"a100": 4},
                  shard_total=32),
             Node("v100-1", "IDLE", features=("v100",), partitions=("gpu",), gpus={"v100": 4},
                  mps_total=400)]
    shard = Job(job_id="7", name="s", user="u", account="a", partition="gpu",
                state=JobState.PENDING, submit_time=100, tres_per_node="gres:shard:4")
    cpu = replace(shard, job_id="8", tres_per_node="")
    backend = FakeBackend([shard, cpu], nodes)

    class Clock:
        def now(self) -> float:
            return 1000.0

    res = run_cycle(backend, make_policy("hase"), _Runtimes(), Clock(), UsageLedger(3600.0),
                    {}, CycleConfig(), owned={})
    assert res.errors == [] and [(j, u.features) for j, u in res.applied] == [("7", "a100")]
    assert {j.job_id: j.features for j in backend.jobs()} == {"7": "a100", "8": ""}
