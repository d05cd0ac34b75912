"""GPU shards (gres/shard) on a real local cluster: a second cluster (tests/fixtures/slurm/
shard-cluster.toml, its own ports and folder) with a node of 4 a100 and 32 shards (8 a GPU)
beside a node of 4 v100 with MPS. `hase report usage` counts a job on 4 shards as half an A100,
where it counted it as a CPU-only job before."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from slurm_hase.daemon.cycle import CycleConfig, JobEstimate, run_cycle
from slurm_hase.daemon.loop import WallClock
from slurm_hase.daemon.state import build_state
from slurm_hase.errors import HaseError
from slurm_hase.policy.registry import make_policy
from slurm_hase.policy.usage import UsageLedger
from slurm_hase.slurm.command_backend import CommandBackend
from slurm_hase.slurm.localcluster.manager import LocalCluster
from slurm_hase.slurm.runner import SubprocessRunner
from slurm_hase.slurm.types import AccountingRecord, Job, JobState
from tests.integration.side_cluster import BIN, run_in, side_cluster
from tests.integration.test_adapter_live import wait_for

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def shard_cluster(local_cluster: LocalCluster) -> Iterator[LocalCluster]:
    """The shard cluster, up for this module."""
    with side_cluster(local_cluster, "shard-cluster.toml", "shard-test") as cluster:
        yield cluster


def test_the_node_shows_its_shards(shard_cluster: LocalCluster) -> None:
    backend = CommandBackend(SubprocessRunner(shard_cluster.env))
    nodes = {n.name: n for n in backend.nodes()}
    assert (nodes["a100-1"].gpus, nodes["a100-1"].shard_total) == ({"a100": 4}, 32)
    assert (nodes["v100-1"].mps_total, nodes["v100-1"].shard_total) == (400, 0)


def test_report_counts_a_shard_job_as_its_part_of_a_gpu(
        shard_cluster: LocalCluster, tmp_path: Path) -> None:
    """teama: 4 of a100-1's 8 shards a GPU (half an A100); teamb: a whole A100; teama also
    has a held shard job, pending now."""
    backend = CommandBackend(SubprocessRunner(shard_cluster.env))
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 1))
    ids = [backend.submit(["-o", "/dev/null", "-A", account, gres, "--wrap", "sleep 2"], None)
           for account, gres in (("teama", "--gres=shard:4"), ("teamb", "--gpus=a100:1"))]
    held = backend.submit(["-o", "/dev/null", "-A", "teama", "--hold", "--gres=shard:2",
                           "--wrap", "true"], None)

    def finished() -> list[AccountingRecord] | None:
        recs = [r for r in backend.accounting(job_ids=ids)
                if r.state is JobState.COMPLETED and r.end_time and r.start_time
                and r.eligible_time]
        return recs if len(recs) == 2 else None

    try:
        done = wait_for("both jobs in sacct, whole", finished)
        by_id = {r.job_id: r for r in done}
        shard, whole = by_id[ids[0]], by_id[ids[1]]
        assert shard.alloc_tres["gres/shard"] == "4" and not shard.alloc_gpus
        assert whole.alloc_gpus == {"a100": 1}
        res = run_in(shard_cluster, str(BIN / "hase"), "report", "usage", "--since", since,
                   "--json", "--weights", "none", cwd=tmp_path)
    finally:
        with contextlib.suppress(HaseError):
            backend.cancel(held)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    rows = {a["account"]: a for a in out["accounts"]}

    def hours(rec: AccountingRecord) -> float:
        assert rec.end_time is not None and rec.start_time is not None
        return (rec.end_time - rec.start_time) / 3600

    assert rows["teama"]["gpu_hours"] == {"a100": pytest.approx(0.5 * hours(shard), abs=2e-6)}
    assert rows["teamb"]["gpu_hours"] == {"a100": pytest.approx(hours(whole), abs=2e-6)}
    assert (rows["teama"]["jobs"], rows["teama"]["pending_now"]) == (2, 1)
    assert out["gpu_types"] == ["a100"] and out["cpu_only_jobs"] == 0
    assert out["shards_as_whole_gpus"] == []


class _NoEstimate:
    def estimate(self, job: Job, types: object) -> None:
        return None


def test_gpus_shards_hold_are_busy_and_shard_jobs_hold_their_part(
        shard_cluster: LocalCluster) -> None:
    """Two 4-shard jobs share one GPU, a 6-shard job takes a second, a whole-GPU job a third:
    three of a100-1's GPUs are busy (AllocTRES shows one), and the daemon's state holds the
    shard jobs as 0.5, 0.5 and 0.75 of a GPU."""
    backend = CommandBackend(SubprocessRunner(shard_cluster.env))
    ids = [backend.submit(["-o", "/dev/null", "-A", "teama", "-w", "a100-1", gres, "-t", "5",
                           "--wrap", "sleep 120"], None)
           for gres in ("--gres=shard:4", "--gres=shard:4", "--gres=shard:6", "--gpus=a100:1")]
    try:
        def running() -> list[Job] | None:
            jobs = [j for j in backend.jobs() if j.job_id in ids]
            return jobs if sum(j.state is JobState.RUNNING for j in jobs) == 4 else None

        jobs = wait_for("the four jobs to run", running)
        nodes = backend.nodes()
        assert {n.name: n.gpus_alloc for n in nodes}["a100-1"] == {"a100": 3}
        state = build_state(jobs, nodes, _NoEstimate(), {}, {}, time.time(), CycleConfig())
    finally:
        for jid in ids:
            with contextlib.suppress(HaseError):
                backend.cancel(jid)
    assert (state.pools["a100"].total_gpus, state.pools["a100"].free_gpus) == (4, 1)
    assert sorted(r.gpu_fraction for r in state.running) == [0.5, 0.5, 0.75, 1.0]
    assert {r.account for r in state.running} == {"teama"}


class _Minutes:
    def estimate(self, job: Job, types: Sequence[str]) -> JobEstimate | None:
        return JobEstimate({t: 600.0 for t in types}) if job.name == "plan-shard" else None


def test_a_pending_shard_job_gets_the_type_with_shards(shard_cluster: LocalCluster) -> None:
    """The daemon's cycle constrains a pending shard:4 job to a100, the one type whose nodes
    have shards, and Slurm takes the update; before session 44 the daemon left shard jobs out
    (no record, no plan)."""
    backend = CommandBackend(SubprocessRunner(shard_cluster.env))
    jid = backend.submit(["--parsable", "-o", "/dev/null", "-J", "plan-shard", "-A", "teama",
                          "--gres=shard:4", "--begin=now+3600", "-t", "5", "--wrap", "true"])
    try:
        res = run_cycle(backend, make_policy("hase"), _Minutes(), WallClock(),
                        UsageLedger(3600.0), {}, CycleConfig(), owned={})
        after = backend.job(jid)
    finally:
        with contextlib.suppress(HaseError):
            backend.cancel(jid)
    assert res.errors == []
    assert dict(res.applied)[jid].features == "a100", res.applied
    assert after.features == "a100" and after.tres_per_node.endswith("shard:4")
