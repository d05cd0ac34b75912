"""Job.address for an array's pending tasks: ARRAY_[TASKS], never the bare id that names the
running tasks too (tests/integration/test_array_tasks_live.py shows Slurm's answer to both)."""

from __future__ import annotations

import pytest

from slurm_hase.slurm.types import Job, JobState


def _job(job_id: str, task: str | None, array: str | None = "1969") -> Job:
    return Job(job_id=job_id, name="arr", user="u", account="a", partition="gpu",
               state=JobState.PENDING, array_job_id=array, array_task_id=task)


@pytest.mark.parametrize(("task", "address"), [
    ("7", "1969_7"),              # one task
    ("2-9", "1969_[2-9]"),        # the pending remainder
    ("2-4%1", "1969_[2-4]"),      # throttled: the limit is no task
    ("[3-5%3]", "1969_[3-5]"),
    ("1,3,5-7", "1969_[1,3,5-7]"),
    ("1-9:2", "1969_[1-9:2]"),
    ("1,3,5,7,...", "1969"),      # cut short by squeue: the bare id, as before
])
def test_array_addresses(task: str, address: str) -> None:
    assert _job("1969", task).address == address


def test_plain_jobs_keep_their_id() -> None:
    assert _job("42", None, array=None).address == "42"
    assert _job("42", "", array="42").address == "42"
