"""Array tasks on the real local cluster: the task that started last has the array's own id as
its JobId, and that bare id names every task of the array. The backend acts on one task by its
ARRAY_TASK id, so requeuing (or updating) that task leaves the other task alone."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

import pytest

from slurm_hase.errors import SlurmError
from slurm_hase.slurm.command_backend import CommandBackend
from slurm_hase.slurm.types import Job, JobState, JobUpdate

pytestmark = pytest.mark.slurm


@pytest.fixture
def array(slurm_backend: CommandBackend) -> Iterator[str]:
    """A two-task array of one GPU each, both running (its id)."""
    array_id = slurm_backend.submit(["--parsable", "--array=1-2", "--requeue", "--gpus=1",
                                     "-A", "teama", "-p", "gpu", "-t", "10", "-o", "/dev/null",
                                     "-J", "arr-live", "--wrap", "sleep 300"])
    yield array_id
    for job in slurm_backend.jobs():  # each task: cancel(ID) acts on that one job
        if job.array_job_id == array_id:
            with contextlib.suppress(SlurmError):
                slurm_backend.cancel(job.job_id)


def _tasks(backend: CommandBackend, array_id: str, ok: Callable[[dict[str, Job]], bool],
           what: str, timeout_s: float = 60.0) -> dict[str, Job]:
    deadline = time.time() + timeout_s
    while True:
        tasks = {j.array_task_id or "": j for j in backend.jobs() if j.array_job_id == array_id}
        if ok(tasks):
            return tasks
        if time.time() > deadline:
            raise AssertionError(f"{what}: {[(t, j.job_id, j.state.value) for t, j in tasks.items()]}")
        time.sleep(1)


def test_requeue_of_the_task_with_the_arrays_id_requeues_that_task_only(
        slurm_backend: CommandBackend, array: str) -> None:
    running = _tasks(slurm_backend, array, lambda t: set(t) == {"1", "2"} and all(
        j.state is JobState.RUNNING for j in t.values()), "both tasks running")
    last = next(j for j in running.values() if j.job_id == array)  # JobId == ArrayJobId
    other = next(j for j in running.values() if j.job_id != array)
    assert last.address == f"{array}_{last.array_task_id}"
    assert slurm_backend.job(last.job_id).array_task_id == last.array_task_id
    # before: `scontrol update jobid=<array id>` changed every task of the array
    slurm_backend.update_job(last.job_id, JobUpdate(comment="only-the-last-task"))
    seen = _tasks(slurm_backend, array, lambda t: t[last.array_task_id or ""].comment
                  == "only-the-last-task", "comment set")
    assert seen[other.array_task_id or ""].comment != "only-the-last-task"
    slurm_backend.requeue(last.job_id)
    after = _tasks(slurm_backend, array,
                   lambda t: t.get(last.array_task_id or "") is not None
                   and t[last.array_task_id or ""].state is JobState.PENDING, "task requeued")
    # before: `scontrol requeue <array id>` requeued every task of the array
    kept = after[other.array_task_id or ""]
    assert kept.state is JobState.RUNNING and kept.restarts == 0
    assert after[last.array_task_id or ""].restarts == 1


def test_an_update_of_the_pending_tasks_leaves_the_running_ones_alone(
        slurm_backend: CommandBackend) -> None:
    """22 of the 24 GPUs busy, a 4-task array: 2 tasks run, the pending record (JobId = the
    array's id, tasks "3-4") is updated. By its bare id, Slurm 22.05 also set Nice on the
    running tasks and refused their Features with exit 1 (the update counted as failed)."""
    filler = slurm_backend.submit(["--parsable", "--gpus=22", "-A", "teama", "-p", "gpu",
                                   "-t", "10", "-o", "/dev/null", "-J", "arr-fill",
                                   "--wrap", "sleep 300"])
    array_id = ""
    try:
        array_id = slurm_backend.submit(["--parsable", "--array=1-4", "--gpus=1", "-A", "teama",
                                         "-p", "gpu", "-t", "10", "-o", "/dev/null",
                                         "-J", "arr-part", "--wrap", "sleep 300"])
        tasks = _tasks(slurm_backend, array_id, lambda t: sum(
            j.state is JobState.RUNNING for j in t.values()) == 2 and any(
            j.state is JobState.PENDING for j in t.values()), "two tasks running, two pending")
        pending = next(j for j in tasks.values() if j.state is JobState.PENDING)
        assert pending.job_id == array_id and pending.address.startswith(f"{array_id}_[")
        slurm_backend.update_job(pending.job_id, JobUpdate(nice=10, features="a100"))
        after = _tasks(slurm_backend, array_id, lambda t: any(
            j.state is JobState.PENDING and j.nice == 10 for j in t.values()), "update landed")
        for job in after.values():
            if job.state is JobState.RUNNING:
                assert job.nice == 0 and job.features == "", job
            else:
                assert job.features == "a100"
        assert slurm_backend.job(pending.job_id).job_id == array_id  # show job: the bare id
    finally:
        for job in slurm_backend.jobs():
            if job.job_id == filler or (array_id and job.array_job_id == array_id):
                with contextlib.suppress(SlurmError):
                    slurm_backend.cancel(job.job_id)
