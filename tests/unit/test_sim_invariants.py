"""The simulated controller's books balance under every policy: GPUs are never double-booked
or lost, MPS shares never exceed a GPU, and a job's running time pays for exactly its work.

Every start, end and requeue is checked as it happens, on a contended mix of the Gavel trace
excerpt (whole and half GPUs, opted-in and plain jobs, several accounts), so a bench figure
never rests on a cluster that handed out GPUs it did not have.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest

from slurm_hase.sim.cluster import uniform_cluster
from slurm_hase.sim.engine import SimConfig, simulate
from slurm_hase.sim.simcluster import SimCluster, SimJob
from slurm_hase.sim.simslurm import SimSlurm
from slurm_hase.sim.throughput import ThroughputTable, load_throughputs
from slurm_hase.sim.traces import TraceJob, load_gavel
from slurm_hase.slurm.types import JobState

OVERHEAD_S = 120.0
FAST_FAIR = {"theta": 0.2, "sfq": 0.0, "floor": 0.57, "yield_factor": 3.0, "narrow": 1.0}

# (policy, knobs, share of jobs opting in to checkpoint + requeue, daemon cycle s, share of
# 1-GPU jobs opting in to MPS pairing)
SETUPS = [
    ("fifo", {}, 0.0, 60.0, 0.0),
    ("hase", {}, 0.0, 60.0, 0.0),
    ("gavel", {}, 0.0, 60.0, 0.0),
    ("fair", {"theta": 0.2}, 1.0, 60.0, 0.0),
    ("fair", FAST_FAIR, 1.0, 15.0, 0.0),
    ("fair", {"theta": 0.2, "idle_fill": 0.5, "migrate_margin": 0.1}, 0.5, 60.0, 0.0),
    ("fair", {**FAST_FAIR, "share_gain": 1.2, "share_level": 0.0}, 1.0, 15.0, 1.0),
]


@pytest.fixture(scope="module")
def table(fixtures_dir: Path) -> ThroughputTable:
    return load_throughputs(fixtures_dir / "sim" / "gavel_throughputs_excerpt.json")


def _mix(fixtures_dir: Path, table: ThroughputTable) -> list[TraceJob]:
    """Three draws of the excerpt (accounts differ per draw), one job every 90 s; every fifth
    job asks for half a GPU (MPS), every other one for checkpointing."""
    out: list[TraceJob] = []
    for seed in (0, 1, 2):
        out += load_gavel(fixtures_dir / "sim" / "gavel_max_min_fairness_excerpt.trace", table,
                          np.random.default_rng(seed))
    jobs = []
    for i, j in enumerate(out):
        half = i % 5 == 4 and j.num_gpus == 1
        jobs.append(replace(j, job_id=str(i), submit_s=90.0 * i, checkpoint=i % 2 == 0,
                            gpu_fraction=0.5 if half else 1.0))
    return jobs


@dataclass
class Run:
    """One stretch of a job on GPUs: [start, end) on one type, whole GPUs or an MPS share."""

    start: float
    gtype: str
    shared: bool
    end: float = math.nan


class Books:
    """Checks the cluster's books after every start, end and requeue; records each job's runs."""

    def __init__(self) -> None:
        self.runs: dict[int, list[Run]] = {}  # job idx -> its runs, in order
        self.events = 0

    def check(self, sim: SimCluster) -> None:
        self.events += 1
        for gtype in sim.type_order:
            nodes = sim.type_nodes[gtype]
            for i in nodes:
                assert 0 <= sim.node_free[i] <= sim.nodes_spec[i].gpus, (gtype, i)
            assert sum(sim.node_free[i] for i in nodes) == sim.type_free[gtype]
            whole = sum(j.trace.num_gpus for j in sim.running.values()
                        if j.shared is None and j.gpu_type == gtype)
            shared = sim.shared[gtype]
            assert whole + len(shared) + sim.type_free[gtype] == sim.type_total[gtype], gtype
            for gpu in shared:
                assert gpu.residents and -1e-9 <= gpu.used <= 1.0 + 1e-9
                assert gpu.used == pytest.approx(
                    sum(sim.by_idx[r].frac for r in gpu.residents))

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        start, finish, requeue = SimCluster.start, SimCluster._finish, SimSlurm.requeue

        def checked_start(sim: SimCluster, job: SimJob, gtype: str, now: float) -> None:
            assert job.state is JobState.PENDING
            start(sim, job, gtype, now)
            self.runs.setdefault(job.idx, []).append(Run(now, gtype, job.shared is not None))
            self.check(sim)

        def checked_finish(sim: SimCluster, job: SimJob, t: float) -> None:
            finish(sim, job, t)
            self.runs[job.idx][-1].end = t
            self.check(sim)

        def checked_requeue(sim: SimSlurm, job_id: str) -> None:
            requeue(sim, job_id)
            self.runs[sim.jobs_by_id[job_id].idx][-1].end = sim.now
            self.check(sim)

        monkeypatch.setattr(SimCluster, "start", checked_start)
        monkeypatch.setattr(SimCluster, "_finish", checked_finish)
        monkeypatch.setattr(SimSlurm, "requeue", checked_requeue)


@pytest.mark.parametrize(("policy", "knobs", "ckpt", "interval", "pairing"), SETUPS,
                         ids=["fifo", "hase", "gavel", "fair-ckpt", "fair-fast-15s", "fair-fill",
                              "fair-pairing"])
def test_books_balance_at_every_event(policy: str, knobs: dict[str, float], ckpt: float,
                                      interval: float, pairing: float, table: ThroughputTable,
                                      fixtures_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jobs = _mix(fixtures_dir, table)
    books = Books()
    books.install(monkeypatch)
    spec = uniform_cluster({"k80": 6, "p100": 6, "v100": 6}, gpus_per_node=2)
    res = simulate(jobs, spec, table, SimConfig(policy=policy, knobs=knobs, interval_s=interval,
                                               checkpoint_share=ckpt, share_optin=pairing,
                                               requeue_overhead_s=OVERHEAD_S))
    assert res.unfinished == 0 and books.events >= 2 * len(jobs)
    requeued = 0
    for job in res.jobs:
        assert job.state is JobState.COMPLETED, job.job_id
        runs = books.runs[job.idx]
        assert all(run.end >= run.start for run in runs)  # nan (never ended) fails too
        best = min(r for r in job.runtime.values() if math.isfinite(r))
        assert job.end >= job.trace.submit_s + best * (1 - 1e-9)  # no job beats its best speed
        if any(run.shared for run in runs):
            continue  # MPS residents run at their pair's measured rate: checked in test_sim_engine
        # whole GPUs: the time run on each type pays for the whole job plus, per requeue, the
        # progress it lost on the type it was stopped on (work_left grows by overhead / runtime)
        work = sum((run.end - run.start) / job.runtime[run.gtype] for run in runs)
        lost = sum(min(OVERHEAD_S / job.runtime[run.gtype], 1.0) for run in runs[:-1])
        assert work == pytest.approx(1.0 + lost, rel=1e-6), job.job_id
        requeued += len(runs) > 1
    if ckpt > 0 and policy == "fair" and pairing == 0:
        assert requeued > 0  # the mix is contended enough for rotation to act
    if pairing > 0:  # the daemon turned waiting whole-GPU jobs into shares, and they shared
        paired = [j for j in res.jobs if j.frac < 1.0 and j.trace.gpu_fraction >= 1.0]
        assert paired and any(run.shared for j in paired for run in books.runs[j.idx])
