"""Pending jobs from squeue, for the report's "pending now" count (sacct misses some)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from slurm_hase.slurm.types import AccountingRecord, Job, JobState


def _job_id(job: Job) -> str:
    """squeue's id in sacct's spelling: a pending array is ``11_[1-3]``, one task ``11_2``."""
    task = job.array_task_id
    if job.array_job_id and task and not task.isdigit():
        return f"{job.array_job_id}_[{task}]"
    return job.address


_PENDING_ARRAY = re.compile(r"\d+_\[([^\]]*)\]")
_TASKS = re.compile(r"(\d+)(?:-(\d+)(?::(\d+))?)?")


def array_tasks(job_id: str) -> int:
    """How many tasks one record stands for: a pending array is one record for all its tasks
    still pending (``11_[1-3]``, ``11_[1,4-9:2%2]``: ranges, steps, a throttle), each a job
    once it runs (``11_2``); any other id, or a task list that does not read, is one."""
    found = _PENDING_ARRAY.fullmatch(job_id)
    if not found:
        return 1
    total = 0
    for part in found[1].split("%")[0].split(","):
        m = _TASKS.fullmatch(part.strip())
        if m is None:
            return 1
        lo, hi, step = int(m[1]), int(m[2] or m[1]), int(m[3] or 1)
        if hi < lo or step < 1:
            return 1
        total += (hi - lo) // step + 1
    return max(total, 1)


def pending_record(job: Job, asked: Mapping[str, str] | None = None) -> AccountingRecord:
    """A pending squeue job as a sacct-like record (no start, no allocation). Its ReqTRES:
    `asked` (sacct's, where sacct has the job), else the GPUs squeue shows it asking for."""
    req: dict[str, str] = dict(asked or {})
    if not req and job.gpu is not None:
        if job.gpu.mps > 0:
            req["gres/mps"] = str(job.gpu.mps)
        elif job.gpu.count > 0:
            req["gres/gpu"] = str(job.gpu.count)
    return AccountingRecord(
        job_id=_job_id(job), name=job.name, account=job.account, user=job.user,
        state=JobState.PENDING, partition=job.partition, submit_time=job.submit_time,
        constraints=job.features, comment=job.comment, req_tres=req,
    )


def with_queue(records: Sequence[AccountingRecord], jobs: Iterable[Job],
               until: int | None = None) -> list[AccountingRecord]:
    """sacct's records with its PENDING ones replaced by squeue's pending jobs.

    squeue is what pends now: sacct leaves out held jobs (no eligible time) and Slurm 22.05's
    sacct can lack every job still in the queue. With ``until`` (epoch), jobs submitted after it
    are left out.
    """
    # what sacct says a pending job asks for (its ReqTRES has GPUs asked per task or socket,
    # which squeue's fields read here do not show)
    asked = {r.job_id: r.req_tres for r in records if r.state is JobState.PENDING and r.req_tres}
    queued = [pending_record(j, asked.get(_job_id(j))) for j in jobs
              if j.state is JobState.PENDING
              and (until is None or j.submit_time is None or j.submit_time <= until)]
    return [r for r in records if r.state is not JobState.PENDING] + queued
