"""Rotation on the real local cluster: one account holds every GPU with checkpointable jobs, a
second account's job arrives; one cycle of the fair policy requeues one job through
`scontrol requeue`, puts it behind the queue, and the newcomer starts on the freed GPU."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence

import pytest

from slurm_hase.daemon.cycle import CycleConfig, CycleResult, JobEstimate, OwnedAttrs, run_cycle
from slurm_hase.daemon.loop import WallClock
from slurm_hase.daemon.progress import ProgressEstimator
from slurm_hase.errors import SlurmError
from slurm_hase.policy.registry import make_policy
from slurm_hase.policy.types import Policy
from slurm_hase.policy.usage import UsageLedger
from slurm_hase.slurm.command_backend import CommandBackend
from slurm_hase.slurm.types import AccountingRecord, Job, JobState

pytestmark = pytest.mark.slurm
CKPT = '{"hase":1,"model":"resnet50","ckpt":1}'
GPUS = 24  # the default local cluster: 6 nodes x 4 fake GPUs


class Table:
    """teama's jobs are long (5000 s), teamb's short (100 s); opt-in read from the comment."""

    def estimate(self, job: Job, gpu_types: Sequence[str]) -> JobEstimate | None:
        if not job.name.startswith("rot-"):
            return None
        runtime = 5000.0 if job.account == "teama" else 100.0
        return JobEstimate({t: runtime for t in gpu_types}, checkpoint='"ckpt":1' in job.comment)


@pytest.fixture
def submitted(slurm_backend: CommandBackend) -> Iterator[list[str]]:
    ids: list[str] = []
    yield ids
    for jid in ids:
        with contextlib.suppress(SlurmError):
            slurm_backend.cancel(jid)


def by_id(backend: CommandBackend, ids: Sequence[str]) -> dict[str, Job]:
    wanted = set(ids)
    return {j.job_id: j for j in backend.jobs() if j.job_id in wanted}


def wait_for(backend: CommandBackend, ids: Sequence[str], ok: object, what: str,
             timeout_s: float = 60.0) -> dict[str, Job]:
    deadline = time.time() + timeout_s
    while True:
        jobs = by_id(backend, ids)
        if ok(jobs):  # type: ignore[operator]
            return jobs
        if time.time() > deadline:
            raise AssertionError(f"{what}: {[(j.job_id, j.state.value) for j in jobs.values()]}")
        time.sleep(1)


def fill_with_teama(backend: CommandBackend, submitted: list[str]) -> list[str]:
    """One checkpointing 1-GPU job of teama on every GPU, all running (their ids)."""
    holders = [backend.submit(["--parsable", "-J", f"rot-a{i}", "-A", "teama", "-p", "gpu",
                               "--gpus=1", "-t", "30", "--requeue", f"--comment={CKPT}",
                               "--wrap", "sleep 600"]) for i in range(GPUS)]
    submitted.extend(holders)
    wait_for(backend, holders,
             lambda js: sum(j.state is JobState.RUNNING for j in js.values()) == GPUS,
             "teama did not fill the cluster")
    return holders


def rotation_cycle(backend: CommandBackend, policy: Policy,
                   owned: dict[str, OwnedAttrs]) -> CycleResult:
    """One cycle on the gpu partition with requeue on (no minimum run), teama and teamb at equal
    shares, the Table's estimates."""
    return run_cycle(backend, policy, Table(), WallClock(), UsageLedger(3600.0),
                     {"teama": 1.0, "teamb": 1.0},
                     CycleConfig(partitions=("gpu",), requeue=True, requeue_min_run_s=0.0),
                     owned=owned)


def test_fair_requeues_one_checkpointed_job_for_the_newcomer(
        slurm_backend: CommandBackend, submitted: list[str]) -> None:
    holders = fill_with_teama(slurm_backend, submitted)
    newcomer = slurm_backend.submit(["--parsable", "-J", "rot-b", "-A", "teamb", "-p", "gpu",
                                     "--gpus=1", "-t", "30", "--wrap", "sleep 600"])
    submitted.append(newcomer)
    policy = make_policy("fair", min_run_s=0.0)
    owned: dict[str, OwnedAttrs] = {}
    res = rotation_cycle(slurm_backend, policy, owned)
    assert len(res.requeued) == 1 and res.requeued[0] in holders, (res.requeued, res.skipped)
    assert not res.errors, res.errors
    victim = res.requeued[0]
    jobs = wait_for(slurm_backend, [victim, newcomer],
                    lambda js: js[newcomer].state is JobState.RUNNING, "newcomer did not start")
    back = jobs[victim]
    assert back.state is JobState.PENDING and back.restarts == 1 and back.requeue
    assert back.nice > 0 and owned[victim].nice == back.nice  # behind the queue, and ours
    # one requeue only: the other 23 still run, and a second cycle takes nothing more
    res2 = rotation_cycle(slurm_backend, policy, owned)
    assert res2.requeued == []
    running = [j for j in by_id(slurm_backend, holders).values() if j.state is JobState.RUNNING]
    assert len(running) == GPUS - 1


def test_requeue_refused_without_opt_in_on_the_real_cluster(
        slurm_backend: CommandBackend, submitted: list[str]) -> None:
    plain = slurm_backend.submit(["--parsable", "-J", "rot-plain", "-A", "teama", "-p", "gpu",
                                  "--gpus=1", "-t", "30", "--no-requeue",
                                  f"--comment={CKPT}", "--wrap", "sleep 600"])
    submitted.append(plain)
    job = wait_for(slurm_backend, [plain], lambda js: js[plain].state is JobState.RUNNING,
                   "job did not start")[plain]
    assert not job.requeue  # --no-requeue reaches the daemon as Requeue=0
    from slurm_hase.daemon.requeue import opted_in
    from slurm_hase.policy.types import Decision

    class Ask:
        name, summary = "ask", "test"

        def decide(self, state: object) -> list[Decision]:
            return [Decision(plain, requeue=True)]

    res = run_cycle(slurm_backend, Ask(), Table(), WallClock(), UsageLedger(3600.0), {},
                    CycleConfig(partitions=("gpu",), requeue=True, requeue_min_run_s=0.0))
    assert not opted_in(job) and res.requeued == []
    assert "not opted in" in dict(res.skipped)[plain]
    assert by_id(slurm_backend, [plain])[plain].state is JobState.RUNNING


def test_a_job_cancelled_after_the_cycle_saw_it_is_not_revived(
        slurm_backend: CommandBackend, submitted: list[str]) -> None:
    from slurm_hase.daemon.requeue import apply_requeues

    def opted(name: str) -> str:
        jid = slurm_backend.submit(["--parsable", "-J", name, "-A", "teama", "-p", "gpu",
                                    "--gpus=1", "-t", "30", "--requeue", f"--comment={CKPT}",
                                    "--wrap", "sleep 600"])
        submitted.append(jid)
        return jid

    raw, ours = opted("rot-raw"), opted("rot-ours")
    wait_for(slurm_backend, [raw, ours],
             lambda js: all(j.state is JobState.RUNNING for j in js.values()), "jobs did not start")
    # the cycle observed both running; then their users cancelled them
    slurm_backend.cancel(raw)
    slurm_backend.cancel(ours)
    wait_for(slurm_backend, [raw, ours], lambda js: not js, "cancelled jobs still listed by squeue")
    # why the daemon reads the job again: Slurm itself revives a cancelled job on requeue
    slurm_backend.requeue(raw)
    revived = slurm_backend.job(raw)  # 24.11 may still say COMPLETING a moment, then PENDING
    assert revived.restarts == 1 and revived.state is not JobState.CANCELLED, revived
    res = CycleResult(decisions=[], applied=[], skipped=[], errors=[], started=time.time(),
                      duration_s=0.0)
    apply_requeues(slurm_backend, [(ours, None)], res, owned=None)
    assert res.requeued == [] and not res.errors
    # Slurm 24.11 can show a cancelled job COMPLETING for a moment after squeue dropped it
    # (CI saw it once): refused either way, by the state the daemon reads again
    assert dict(res.skipped)[ours] in ("requeue refused: cancelled since observed",
                                       "requeue refused: completing since observed")
    deadline = time.time() + 30
    kept = slurm_backend.job(ours)
    while kept.state is JobState.COMPLETING and time.time() < deadline:
        time.sleep(0.5)
        kept = slurm_backend.job(ours)
    assert kept.state is JobState.CANCELLED and kept.restarts == 0, kept


class Minute:
    """One checkpointing job of 60 s on every type."""

    def estimate(self, job: Job, gpu_types: Sequence[str]) -> JobEstimate | None:
        return JobEstimate({t: 60.0 for t in gpu_types}, checkpoint='"ckpt":1' in job.comment)


def test_a_requeued_checkpointing_job_is_estimated_at_its_work_left(
        slurm_backend: CommandBackend, submitted: list[str]) -> None:
    """It runs ~12 s of its 60 s, is requeued; sacct's REQUEUED run gives it 80% left."""
    jid = slurm_backend.submit(["--parsable", "-J", "rot-left", "-A", "teama", "-p", "gpu",
                                "--gpus=t4:1", "-t", "30", "--requeue", f"--comment={CKPT}",
                                "--wrap", "sleep 600"])
    submitted.append(jid)
    wait_for(slurm_backend, [jid], lambda js: js[jid].state is JobState.RUNNING, "did not start")
    time.sleep(12)
    slurm_backend.requeue(jid)
    job = wait_for(slurm_backend, [jid], lambda js: js[jid].restarts == 1
                   and js[jid].state is JobState.PENDING, "not requeued")[jid]

    def run_recorded() -> list[AccountingRecord]:
        return [r for r in slurm_backend.accounting(job_ids=[jid]) if r.state is JobState.REQUEUED]

    deadline = time.time() + 60
    while not run_recorded() and time.time() < deadline:
        time.sleep(1)
    (run,) = run_recorded()
    assert run.alloc_gpus == {"t4": 1} and 11 <= run.elapsed_s <= 20
    est = ProgressEstimator(Minute(), lambda ids: slurm_backend.accounting(job_ids=ids),
                            time.time, overhead_s=0.0)
    got = est.estimate(job, ["t4", "a100"])
    assert got is not None
    assert got.runtime_s == {t: pytest.approx(60.0 - run.elapsed_s) for t in ("t4", "a100")}
    # control: the same job's estimate without its runs is the whole minute
    assert Minute().estimate(job, ["t4"]) == JobEstimate({"t4": 60.0}, checkpoint=True)
