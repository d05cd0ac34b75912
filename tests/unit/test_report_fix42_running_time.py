"""A job still running holds its GPUs from its start to when sacct was asked, time suspended
included: sacct's Elapsed leaves suspended time out, so start + Elapsed counted a suspended
running job short, and the same job counted start..end once it had ended."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from slurm_hase.reports.fairness import fairness_report, run_seconds
from slurm_hase.slurm.parse_sacct_text import parse_sacct_parsable
from slurm_hase.slurm.types import AccountingRecord, JobState
from tests.conftest import slurm_capture

pytestmark = pytest.mark.usefixtures("utc")

HOUR = 3600
SUSPENDED_S = 3000  # of its first hour; Elapsed is the other 600 s


def _run_v100(fixtures_dir: Path) -> AccountingRecord:
    """The 24.11 capture's run-v100 (2 V100s, RUNNING, End Unknown), as sacct shows it an
    hour after its start when it spent 3000 s of that hour suspended: ElapsedRaw 600."""
    recs = parse_sacct_parsable(slurm_capture(fixtures_dir, "24.11", "sacct-parsable.txt"))
    [job] = [r for r in recs if r.name == "run-v100"]
    assert job.state is JobState.RUNNING and job.end_time is None and job.start_time
    return dataclasses.replace(job, elapsed_s=HOUR - SUSPENDED_S)


@pytest.mark.parametrize("state", [JobState.RUNNING, JobState.SUSPENDED])
def test_a_running_job_counts_to_the_query_time(fixtures_dir: Path, state: JobState) -> None:
    job = dataclasses.replace(_run_v100(fixtures_dir), state=state)
    assert job.start_time is not None
    asked = job.start_time + HOUR
    assert run_seconds(job, queried_at=asked) == HOUR
    rep = fairness_report([job], queried_at=asked)
    assert rep.accounts[0].gpu_hours == {"v100": pytest.approx(2.0)}  # 2 GPUs x 1 h
    # the same job once it has ended counts the same start..end
    ended = dataclasses.replace(job, state=JobState.COMPLETED, end_time=asked)
    assert fairness_report([ended]).accounts[0].gpu_hours == {"v100": pytest.approx(2.0)}


def test_the_window_still_clips_a_running_job(fixtures_dir: Path) -> None:
    job = _run_v100(fixtures_dir)
    assert job.start_time is not None
    asked = job.start_time + HOUR
    half = (job.start_time - HOUR, job.start_time + HOUR // 2)  # --until before the query
    assert run_seconds(job, window=half, queried_at=asked) == HOUR // 2
    later = (job.start_time, job.start_time + 5 * HOUR)  # --until ahead of now: now counts
    assert run_seconds(job, window=later, queried_at=asked) == HOUR
    rep = fairness_report([job], window=later, queried_at=asked)
    assert rep.accounts[0].gpu_hours == {"v100": pytest.approx(2.0)}


def test_without_a_query_time_elapsed_stands_in(fixtures_dir: Path) -> None:
    """A saved sacct --json does not record when sacct ran (its meta holds the version,
    the command line and the cluster): start + Elapsed is all there is."""
    job = _run_v100(fixtures_dir)
    assert run_seconds(job) == HOUR - SUSPENDED_S
    assert fairness_report([job]).accounts[0].gpu_hours == {
        "v100": pytest.approx(2 * (HOUR - SUSPENDED_S) / HOUR)}


def test_query_time_never_counts_less_than_elapsed(fixtures_dir: Path) -> None:
    """The query time is taken just before sacct runs; sacct's Elapsed (of its own moment)
    may reach a little past it, and a job held its GPUs at least that long."""
    job = dataclasses.replace(_run_v100(fixtures_dir), elapsed_s=HOUR)
    assert job.start_time is not None
    assert run_seconds(job, queried_at=job.start_time + HOUR - 5) == HOUR


def test_query_time_leaves_ended_and_pending_jobs_alone(fixtures_dir: Path) -> None:
    recs = parse_sacct_parsable(slurm_capture(fixtures_dir, "24.11", "sacct-parsable.txt"))
    late = 4_000_000_000  # long after every job of the capture
    for rec in recs:
        if rec.state is not JobState.RUNNING:
            assert run_seconds(rec, queried_at=late) == run_seconds(rec), rec.name
    [done_t4] = [r for r in recs if r.name == "done-t4"]
    assert run_seconds(done_t4, queried_at=late) == 2  # start..end of the capture
