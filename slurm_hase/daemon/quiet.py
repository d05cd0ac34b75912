"""Quiet cycles (CycleConfig.refresh_s): what the last deciding cycle observed, and whether a
new observation holds the same jobs as far as the policy's decisions go."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter, is_

from slurm_hase.daemon.records import waits_on_other
from slurm_hase.policy.types import RunningJob
from slurm_hase.slurm.types import Job, Node

__all__ = ["QuietWatch", "same_job_set"]


@dataclass
class QuietWatch:
    """What the last deciding cycle observed (its jobs and nodes), when, and the running jobs
    it built; the caller keeps one across cycles (run_cycle's `watch`)."""

    jobs: list[Job] | None = None
    nodes: list[Node] | None = None
    decided_at: float = -math.inf
    running: Sequence[RunningJob] = ()  # for the ledger in quiet cycles
    # when a job the last deciding cycle decided around for its begin time comes within the
    # horizon (records.begins_later): from then on a cycle decides
    wake_at: float = math.inf


def _job_set_key(job: Job) -> tuple[object, ...]:
    """(state, held, waiting on other than GPUs, restarts, GPU request, partition, begin
    time). Not the reason BeginTime: Slurm clears it on every update of the job (the daemon's
    own too) and sets it again at its next pass; the begin time (EligibleTime) stays."""
    return (job.state, job.held, waits_on_other(job.reason), job.restarts, job.gpu,
            job.partition, job.eligible_time)


def _job_set(jobs: Sequence[Job]) -> dict[str, tuple[object, ...]]:
    """Job id -> _job_set_key: a job's Nice and Features are left out, as the daemon changes
    them itself; its pending reason only as far as it waits on other than GPUs (a dependency
    met makes it one the policy plans for)."""
    return dict(zip(map(attrgetter("job_id"), jobs), map(_job_set_key, jobs), strict=True))


def same_job_set(before: Sequence[Job] | None, now: Sequence[Job]) -> bool:
    """Whether `now` holds the same jobs as `before` with the same _job_set entries. Cheap
    where a backend hands back the same Job objects (the simulator): those are not compared."""
    if before is None or len(before) != len(now):
        return False
    if all(map(is_, before, now)):
        return True
    ids = attrgetter("job_id")
    ids_before, ids_now = list(map(ids, before)), list(map(ids, now))
    if ids_before == ids_now:  # the same order: compare the others
        return all(_job_set_key(a) == _job_set_key(b) for a, b in zip(before, now, strict=True)
                   if a is not b)
    if set(ids_before) != set(ids_now):  # one job left and another came: no need to compare
        return False
    return _job_set(before) == _job_set(now)
