"""SlurmScheduler's cached priority order: it must always equal a fresh sort of the pending jobs."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from slurm_hase.sim.cluster import uniform_cluster
from slurm_hase.sim.sched import SlurmScheduler, order_key
from slurm_hase.sim.simslurm import SimJob, SimSlurm
from slurm_hase.sim.slurmconf import SlurmConfig
from slurm_hase.sim.throughput import ThroughputTable, load_throughputs
from slurm_hase.sim.traces import TraceJob
from slurm_hase.slurm.types import JobState, JobUpdate

R50 = "ResNet-50 (batch size 64)"


@pytest.fixture(scope="module")
def table(fixtures_dir: Path) -> ThroughputTable:
    return load_throughputs(fixtures_dir / "sim" / "gavel_throughputs_excerpt.json")


def _job(i: int, t: float, acct: str = "a", gpus: int = 1) -> TraceJob:
    return TraceJob(str(i), t, acct, acct, gpus, 3600.0, 1.0, R50, ())


def _setup(table: ThroughputTable, gpus: int, n: int) -> tuple[SimSlurm, SlurmScheduler]:
    sim = SimSlurm(uniform_cluster({"v100": gpus}, gpus_per_node=1), table)
    sched = SlurmScheduler(sim, SlurmConfig(), {})
    for i in range(n):
        sched.prioritize(sim.add(_job(i, float(i), acct="ab"[i % 2]), float(i)), float(i))
    return sim, sched


def _fresh(sim: SimSlurm) -> list[str]:
    return [j.job_id for j in sorted(sim.pending.values(), key=order_key)]


def _ids(jobs: list[SimJob]) -> list[str]:
    return [j.job_id for j in jobs]


def test_nice_update_between_passes_changes_what_main_starts(table: ThroughputTable) -> None:
    sim, sched = _setup(table, gpus=1, n=3)
    assert _ids(sched.order()) == ["0", "1", "2"]  # the cache is built here
    sim.update_job("2", JobUpdate(nice=-100))  # what the daemon does to move a job up
    assert _ids(sched.order()) == ["2", "0", "1"]
    assert sched.main(10.0) == 1
    assert sim.jobs_by_id["2"].state is JobState.RUNNING  # a stale cache would start job 0
    assert sim.jobs_by_id["0"].reason == "Resources"


def test_recalc_reorders_the_cached_queue(table: ThroughputTable) -> None:
    sim, sched = _setup(table, gpus=2, n=6)
    sched.recalc(10.0)
    assert _ids(sched.order()) == ["0", "1", "2", "3", "4", "5"]
    sched.main(10.0)  # jobs 0 and 1 (accounts a and b) start
    sim.add(_job(9, 20.0, acct="b"), 20.0)
    sched.usage["a"] = 1e9  # account a used far more than b: its jobs fall behind after recalc
    sched.recalc(30.0)
    assert _ids(sched.order()) == _fresh(sim) == ["3", "5", "9", "2", "4"]


def test_requeued_job_is_back_in_the_order(table: ThroughputTable) -> None:
    sim, sched = _setup(table, gpus=1, n=3)
    sched.main(5.0)
    assert _ids(sched.order()) == ["1", "2"]  # job 0 started; its entry is dropped
    job = sim.jobs_by_id["0"]  # put back in the queue the way a requeue does
    del sim.running["0"]
    job.state = JobState.PENDING
    sim.pending["0"] = job
    assert _ids(sched.order()) == ["0", "1", "2"]


def test_cached_order_matches_a_fresh_sort_under_random_changes(table: ThroughputTable) -> None:
    rng = random.Random(7)
    sim, sched = _setup(table, gpus=8, n=40)
    t, nxt = 40.0, 40
    for step in range(400):
        op = rng.random()
        t += rng.random() * 30
        if op < 0.3:
            sched.prioritize(sim.add(_job(nxt, t, acct=rng.choice("abc"), gpus=rng.choice([1, 2])), t), t)
            nxt += 1
        elif op < 0.55 and sim.pending:
            jid = rng.choice(sorted(sim.pending))
            sim.update_job(jid, JobUpdate(nice=rng.randint(-50, 50)))
        elif op < 0.65 and sim.pending:
            sim.cancel(rng.choice(sorted(sim.pending)))
        elif op < 0.8:
            sim.finish_until(t + 3600.0 * rng.random())
            sched.main(t)
        elif op < 0.9:
            sched.backfill(t)
        else:
            sched.recalc(t)
        if step % 3 == 0:
            assert _ids(sched.order()) == _fresh(sim), step


def test_priority_floors_at_one_like_slurm(table: ThroughputTable) -> None:
    sim, sched = _setup(table, gpus=1, n=3)
    base = sim.jobs_by_id["1"].prio_base
    sim.update_job("1", JobUpdate(nice=base + 5_000))  # a Nice larger than every factor
    sim.update_job("2", JobUpdate(nice=base + 9_000))
    assert sim.jobs_by_id["1"].priority == sim.jobs_by_id["2"].priority == 1  # the order is lost
    sched.prioritize(sim.jobs_by_id["2"], 5.0)
    assert sim.jobs_by_id["2"].priority == 1
    sim.update_job("2", JobUpdate(nice=-100))  # a negative Nice only ever raises it
    assert sim.jobs_by_id["2"].priority == sim.jobs_by_id["2"].prio_base + 100


def test_recalc_of_every_job_at_once_equals_prioritize_job_by_job(table: ThroughputTable) -> None:
    # recalc computes the multifactor priority of the whole queue in numpy; prioritize() is the
    # per-job formula (arrivals): both must give the same integers, Nice and the floor at 1 included
    sim, sched = _setup(table, gpus=1, n=40)
    rng = random.Random(3)
    for job in list(sim.pending.values())[::3]:
        sim.update_job(job.job_id, JobUpdate(nice=rng.choice([-5000, -7, 0, 9, 20000])))
    now = 3 * 86400.0 + 123.4
    sched.recalc(now)
    vectorised = {j.job_id: (j.priority, j.prio_base) for j in sim.pending.values()}
    for job in sim.pending.values():
        sched.prioritize(job, now)
    assert {j.job_id: (j.priority, j.prio_base) for j in sim.pending.values()} == vectorised
    assert any(p == 1 for p, _ in vectorised.values())  # the floor was exercised
    assert _ids(sched.order()) == _fresh(sim)


def test_recalc_after_nice_updates_and_a_requeue_keeps_the_columns_in_step(table: ThroughputTable) -> None:
    # recalc reads Nice and priority from numpy columns refreshed from the jobs put in the queue
    # and the jobs re-prioritised since; a stale column would give a wrong priority here
    sim, sched = _setup(table, gpus=2, n=12)
    sched.recalc(100.0)
    sched.main(100.0)  # two jobs start
    sim.update_job("5", JobUpdate(nice=-3000))
    sched.order()  # the incremental sync path drains `reordered`
    sim.update_job("7", JobUpdate(nice=400))
    sim.now = 200.0
    sim.requeue("0")  # back in the queue: `entered`
    now = 2 * 86400.0
    sched.recalc(now)
    vectorised = {j.job_id: (j.priority, j.prio_base) for j in sim.pending.values()}
    for job in sim.pending.values():
        sched.prioritize(job, now)
    assert {j.job_id: (j.priority, j.prio_base) for j in sim.pending.values()} == vectorised
    assert _ids(sched.order()) == _fresh(sim)
    assert _ids(sched.order())[0] == "5"


def test_pending_indexes_and_demand_follow_the_queue(table: ThroughputTable) -> None:
    sim = SimSlurm(uniform_cluster({"v100": 4}, gpus_per_node=1), table)
    sched = SlurmScheduler(sim, SlurmConfig(), {})
    for i in range(2000):  # past the mask's first size
        sim.add(_job(i, float(i), acct="abc"[i % 3], gpus=1 + i % 2), float(i))
    for jid in ("3", "1999"):
        sim.start(sim.jobs_by_id[jid], "v100", 5.0)
    sim.cancel("10")
    assert sim.pending.indexes().tolist() == sorted(j.idx for j in sim.pending.values())
    want: dict[str, float] = {}
    for j in sim.pending.values():
        want[j.trace.account] = want.get(j.trace.account, 0.0) + j.trace.num_gpus
    assert sched.pending_demand() == want


def test_backfill_with_no_free_gpu_starts_nothing_and_returns_early(table: ThroughputTable) -> None:
    sim, sched = _setup(table, gpus=2, n=5)
    assert sched.main(10.0) == 2
    assert not sim.any_room()
    assert sched.backfill(20.0) == 0
    sim.finish_until(10.0 + 3600.0 * 10)  # the two running jobs end: room again
    assert sim.any_room() and sched.backfill(40000.0) == 2
