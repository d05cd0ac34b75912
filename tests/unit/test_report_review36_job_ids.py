"""Which sacct records are one job: the runs of a requeued job are, another job that got the same
id (Slurm reuses ids after a controller reset; `sacct -D` shows both) is not, and each
component of a heterogeneous job and each array task is a job of its own."""

from __future__ import annotations

import pytest

from slurm_hase.reports.fairness import REQUEUE_GAP_S, fairness_report, job_runs
from slurm_hase.slurm import commands
from slurm_hase.slurm.parse_sacct_text import parse_sacct_parsable
from slurm_hase.slurm.types import AccountingRecord, JobState

SEP = commands.SACCT_DELIMITER
HEADER = SEP.join(("JobID", "JobName", "Account", "User", "State", "Submit", "Eligible", "Start",
                   "End", "ElapsedRaw", "AllocTRES", "NodeList"))


def _line(job_id: str, state: str, submit: str, start: str, end: str, elapsed: int,
          tres: str, node: str) -> str:
    return SEP.join((job_id, "j", "teama", "alice", state, submit, submit, start, end,
                     str(elapsed), tres, node))


def _rec(state: JobState, submit: int, start: int | None, end: int | None,
         job_id: str = "105") -> AccountingRecord:
    elapsed = max((end or 0) - start, 0) if start is not None else 0
    return AccountingRecord(job_id, "j", "teama", "alice", state, submit_time=submit,
                            start_time=start, end_time=end, elapsed_s=elapsed,
                            alloc_gpus={"t4": 1} if elapsed else {}, nodes="t4-1" if elapsed else "")


@pytest.mark.usefixtures("utc")
def test_reused_job_id_is_two_jobs_in_sacct_text() -> None:
    """`sacct -D` after a controller reset: job 105 of last month and today's job 105, both
    alice's in teama. Two jobs, each with its own wait (100 s and 20 s), not one job that
    waited 120 s."""
    raw = "\n".join([
        HEADER,
        _line("105", "COMPLETED", "2026-11-01T10:00:00", "2026-11-01T10:01:40",
              "2026-11-01T11:01:40", 3600, "billing=1,cpu=1,gres/gpu:t4=1,gres/gpu=1,node=1", "t4-1"),
        _line("105", "COMPLETED", "2026-12-01T09:00:00", "2026-12-01T09:00:20",
              "2026-12-01T09:30:20", 1800, "billing=1,cpu=1,gres/gpu:t4=1,gres/gpu=1,node=1", "t4-2"),
    ]) + "\n"
    recs = parse_sacct_parsable(raw, delimiter=SEP)
    rep = fairness_report(recs, speed_weights={"t4": 1.0})
    [teama], [alice] = rep.accounts, rep.users
    assert teama.jobs == alice.jobs == 2
    assert teama.mean_wait_s == alice.mean_wait_s == pytest.approx(60.0)
    assert teama.gpu_hours == {"t4": pytest.approx(1.5)}


def test_reused_id_of_a_finished_job_beside_the_new_pending_one() -> None:
    """The old job 105 ran; the new 105 pends now: two jobs, one pending, the old one's wait."""
    recs = [_rec(JobState.COMPLETED, 0, 50, 3650), _rec(JobState.PENDING, 90_000, None, None)]
    [row] = fairness_report(recs).accounts
    assert (row.jobs, row.pending_now, row.never_started) == (2, 1, 0)
    assert row.mean_wait_s == 50


def test_runs_of_a_requeued_job_stay_one_job() -> None:
    """REQUEUED runs are always the job's; a PREEMPTED or NODE_FAIL run is when the next record
    was submitted soon after it ended (a requeue resets the submit time after the epilog)."""
    requeued = [_rec(JobState.REQUEUED, 0, 10, 70), _rec(JobState.COMPLETED, 71, 200, 260)]
    preempted = [_rec(JobState.PREEMPTED, 0, 10, 70), _rec(JobState.COMPLETED, 100, 200, 260)]
    node_fail = [_rec(JobState.NODE_FAIL, 0, 10, 70), _rec(JobState.COMPLETED, 70, 80, 90)]
    for runs in (requeued, preempted, node_fail):
        assert job_runs(runs) == [runs]
    # a preempted (cancelled) job 105, and a job given id 105 again the next day: two jobs
    late = [_rec(JobState.PREEMPTED, 0, 10, 70), _rec(JobState.COMPLETED, 70 + REQUEUE_GAP_S + 1,
                                                       90_000, 90_060)]
    assert job_runs(late) == [[late[0]], [late[1]]]
    # a finished job, then its id reused: apart whatever the gap
    done = [_rec(JobState.COMPLETED, 0, 10, 70), _rec(JobState.COMPLETED, 70, 80, 90)]
    assert job_runs(done) == [[done[0]], [done[1]]]


def test_reused_id_after_a_requeued_job_ended() -> None:
    """Job 105 requeued once and completed; later a new job 105: the first two records are one
    job, the third another."""
    recs = [_rec(JobState.REQUEUED, 0, 10, 70), _rec(JobState.COMPLETED, 70, 100, 160),
            _rec(JobState.COMPLETED, 50_000, 50_010, 50_070)]
    assert job_runs(list(reversed(recs))) == [recs[:2], recs[2:]]
    [row] = fairness_report(recs).accounts
    assert row.jobs == 2 and row.mean_wait_s == pytest.approx((10 + 30 + 10) / 2)


@pytest.mark.usefixtures("utc")
def test_hetjob_components_and_array_tasks_each_count() -> None:
    """sacct -X of the local cluster (22.05) for `sbatch -G1 ... : -G1 ...` and `sbatch -a 1-2
    -G1`: JobIDs 8225+0 and 8225+1 (JobIDRaw 8225, 8226), 8227_1 and 8227_2 (JobIDRaw 8228,
    8227). Each holds its own GPU: four jobs, four GPUs' time. (Not a bug before: JobID keys
    them apart; a guard.)"""
    tres = "billing=1,cpu=1,gres/gpu:{t}=1,gres/gpu=1,node=1"
    at, end = "2026-12-04T11:09:47", "2026-12-04T11:09:50"
    raw = "\n".join([
        HEADER,
        _line("8225+0", "COMPLETED", at, at, end, 3, tres.format(t="t4"), "t4-1"),
        _line("8225+1", "COMPLETED", at, at, end, 3, tres.format(t="a100"), "a100-1"),
        _line("8227_1", "COMPLETED", at, at, end, 3, tres.format(t="t4"), "t4-1"),
        _line("8227_2", "COMPLETED", at, at, end, 3, tres.format(t="t4"), "t4-1"),
    ]) + "\n"
    rep = fairness_report(parse_sacct_parsable(raw, delimiter=SEP), speed_weights={})
    [teama] = rep.accounts
    assert teama.jobs == 4
    assert teama.gpu_hours == {"t4": pytest.approx(9 / 3600), "a100": pytest.approx(3 / 3600)}


def test_sacct_asks_for_allocations_only() -> None:
    """Steps (123.batch, 123.0) are not asked for (-X), so they are never counted on top of
    their job; sacct --json nests them inside their job."""
    assert "-X" in commands.sacct_parsable()
