"""Pending jobs from squeue, for the report's "pending now" count (sacct misses some)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from slurm_hase.slurm.tres import requested_shards
from slurm_hase.slurm.types import AccountingRecord, Job, JobState


def _job_id(job: Job) -> str:
    """squeue's id in sacct's spelling: a pending array is ``11_[1-3]``, one task ``11_2``."""
    task = job.array_task_id
    if job.array_job_id and task and not task.isdigit():
        return f"{job.array_job_id}_[{task}]"
    return job.address


_PENDING_ARRAY = re.compile(r"\d+_\[([^\]]*)\]")
_TASKS = re.compile(r"(\d+)(?:-(\d+)(?::(\d+))?)?")
_RANGE = re.compile(r"(\d+)-(\d+)")
CUT_MARK = "..."  # what sacct and squeue end a task list with when they cut it


def _task_list(job_id: str) -> str | None:
    """The task list of a pending array's record, throttle left off (``11_[1-5%2]``: ``1-5``);
    None for any other id."""
    found = _PENDING_ARRAY.fullmatch(job_id)
    return None if found is None else found[1].split("%")[0]


def array_list_cut(job_id: str) -> bool:
    """Whether Slurm cut a pending array's task list: sacct(1) and squeue(1) print at most
    SLURM_BITSTR_LEN bytes of it (64 unless set; 0: all) and end a longer one with ``...``
    (``11_[1,3,5,...,41,43...]``, before any ``%`` throttle)."""
    tasks = _task_list(job_id)
    return tasks is not None and tasks.endswith(CUT_MARK)


def array_tasks(job_id: str) -> int:
    """How many tasks one record stands for: a pending array is one record for all its tasks
    still pending (``11_[1-3]``, ``11_[1,4-9:2%2]``: ranges, steps, a throttle), each a job
    once it runs (``11_2``); any other id, or a task list that does not read, is one. A list
    Slurm cut (array_list_cut) counts the tasks it still shows, at least one for its cut-off
    end: fewer than the array has."""
    tasks = _task_list(job_id)
    if tasks is None:
        return 1
    if tasks.endswith(CUT_MARK):
        *whole, cut_end = tasks.removesuffix(CUT_MARK).split(",")
        counted = _count_tasks(whole) if whole else 0
        return 1 if counted is None else counted + _at_least(cut_end)
    return _count_tasks(tasks.split(",")) or 1


def _count_tasks(parts: list[str]) -> int | None:
    """Tasks named by the items of a task list (``1``, ``4-9``, ``4-9:2``); None when one does
    not read."""
    total = 0
    for part in parts:
        m = _TASKS.fullmatch(part.strip())
        if m is None:
            return None
        lo, hi, step = int(m[1]), int(m[2] or m[1]), int(m[3] or 1)
        if hi < lo or step < 1:
            return None
        total += (hi - lo) // step + 1
    return total


def _at_least(cut_end: str) -> int:
    """Tasks the item a cut ran through names for sure: its digits begin the real item's, so
    a range ``40-45`` there (of ``40-451``, say) is at least tasks 40..45; anything else (``43``,
    ``40-4``, nothing) one task. A cut list has no ``:step``: Slurm prints a stepped one whole."""
    m = _RANGE.fullmatch(cut_end)
    return int(m[2]) - int(m[1]) + 1 if m and int(m[2]) >= int(m[1]) else 1


def cut_lists_warning(job_ids: Sequence[str]) -> str:
    """The report's warning for pending arrays whose task list Slurm cut (array_list_cut)."""
    arrays = sorted({job_id.partition("_")[0] for job_id in job_ids}, key=lambda a: (len(a), a))
    which = f"array {arrays[0]}" if len(arrays) == 1 else f"arrays {', '.join(arrays)}"
    return (f"Slurm cut the task list of {which} (sacct and squeue print 64 bytes of it "
            f"unless SLURM_BITSTR_LEN=0, and end it with '...'): only the tasks it shows are "
            f"counted, so its job counts are too low")


def pending_record(job: Job, asked: Mapping[str, str] | None = None) -> AccountingRecord:
    """A pending squeue job as a sacct-like record (no start, no allocation). Its ReqTRES:
    `asked` (sacct's, where sacct has the job), else the GPUs, MPS share or GPU shards squeue
    shows it asking for (shards from its TresPerJob/TresPerNode: Job.gpu leaves them out)."""
    req: dict[str, str] = dict(asked or {})
    if not req and job.gpu is not None:
        if job.gpu.mps > 0:
            req["gres/mps"] = str(job.gpu.mps)
        elif job.gpu.count > 0:
            req["gres/gpu"] = str(job.gpu.count)
    if not asked and (shards := requested_shards(job.tres_per_job, job.tres_per_node)):
        req["gres/shard"] = str(shards)
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
