"""A requeued job that checkpoints has only its remaining work to do.

Slurm keeps every run of a requeued job in accounting (sacct -D: one record per run, those cut
short by the requeue in state REQUEUED, with their elapsed time and GPU type). A job that opted
in to checkpointing resumes from its last checkpoint, so each such run did its elapsed time,
less `overhead_s` (the steps since the last checkpoint, saving and loading it), of its work at
that type's speed. ProgressEstimator scales the estimate of such a job to the work left, as the
simulator does with the true work left (sim/engine.py OracleEstimator). A job without
checkpointing starts over and keeps its full estimate.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from slurm_hase.daemon.records import JobEstimate, RuntimeEstimator
from slurm_hase.errors import HaseError
from slurm_hase.slurm.types import AccountingRecord, Job, JobState

log = logging.getLogger("slurm_hase.daemon.progress")

# the least work a requeued job is taken to have left: an estimate is never the whole truth,
# and a job that ran its estimated runtime before a requeue did not finish
MIN_WORK_LEFT = 0.05
RETRY_S = 60.0  # sacct asked again for a job whose runs it does not have all of yet
FORGET_S = 86400.0  # what is known of a job no estimate asked about for this long is dropped


@dataclass
class _Known:
    restarts: int  # the job's restart count the runs are for
    runs: list[Run]
    complete: bool  # as many requeued runs as restarts (or more)
    fetched_at: float
    used_at: float


@dataclass(frozen=True)
class Run:
    """One run of a job cut short by a requeue: the GPU type it ran on and for how long."""

    gpu_type: str
    elapsed_s: float


def requeued_runs(records: Sequence[AccountingRecord]) -> dict[str, list[Run]]:
    """Job id -> its runs that a requeue ended, in sacct's order; a run on no single known GPU
    type has type "" (it counts as a run, but no work done can be read from it)."""
    out: dict[str, list[Run]] = {}
    for rec in records:
        if rec.state is not JobState.REQUEUED:
            continue
        typed = [t for t, n in rec.alloc_gpus.items() if t and n > 0]
        gpu_type = typed[0].lower() if len(typed) == 1 else ""
        out.setdefault(rec.job_id, []).append(Run(gpu_type, float(max(rec.elapsed_s, 0))))
    return out


def work_left(runtime_s: Mapping[str, float], runs: Sequence[Run], overhead_s: float) -> float:
    """The part of a job's work still to do after `runs`: each did (elapsed - overhead) at its
    type's speed (1 / runtime there); a run on a type the estimate has no runtime for did none
    we can count. Within [MIN_WORK_LEFT, 1]."""
    done = 0.0
    for run in runs:
        full = runtime_s.get(run.gpu_type, 0.0)
        if full > 0:
            done += max(run.elapsed_s - overhead_s, 0.0) / full
    return min(max(1.0 - done, MIN_WORK_LEFT), 1.0)


class ProgressEstimator:
    """`inner`'s estimates, a requeued checkpointing job's scaled to the work it has left.

    `fetch(job_ids)` gives sacct's records of those jobs (every run); it is asked once per job
    and restart count, again after RETRY_S while sacct has fewer requeued runs than the job's
    restarts (slurmdbd records a run a moment after slurmctld requeues it) or sacct failed.
    Without its runs a job keeps its full estimate."""

    def __init__(self, inner: RuntimeEstimator,
                 fetch: Callable[[Sequence[str]], Sequence[AccountingRecord]],
                 now: Callable[[], float], overhead_s: float = 120.0) -> None:
        self.inner = inner
        self.fetch = fetch
        self.now = now
        self.overhead_s = overhead_s
        self._known: dict[str, _Known] = {}
        self._pruned_at = now()

    @property
    def repeatable(self) -> bool:
        """Repeatable while the inner one is and no job's runs are still to come."""
        return (getattr(self.inner, "repeatable", False) is True
                and all(k.complete for k in self._known.values()))

    def estimate(self, job: Job, gpu_types: Sequence[str]) -> JobEstimate | None:
        est = self.inner.estimate(job, gpu_types)
        if est is None or not est.checkpoint or job.restarts <= 0:
            return est
        runs = self._runs_of(job)
        if not runs:
            return est
        left = work_left(est.runtime_s, runs, self.overhead_s)
        if left >= 1.0:
            return est
        return replace(est, runtime_s={t: r * left for t, r in est.runtime_s.items()})

    def _runs_of(self, job: Job) -> list[Run]:
        now = self.now()
        if now - self._pruned_at >= FORGET_S:
            self._pruned_at = now
            for job_id in [j for j, k in self._known.items() if now - k.used_at >= FORGET_S]:
                del self._known[job_id]
        known = self._known.get(job.job_id)
        if known is not None and known.restarts == job.restarts and (
                known.complete or now - known.fetched_at < RETRY_S):
            known.used_at = now
            return known.runs
        try:
            runs = requeued_runs(self.fetch([job.job_id])).get(job.job_id, [])
        except HaseError as exc:
            log.warning("runs of requeued job %s not read from sacct: %s", job.job_id, exc)
            runs = known.runs if known is not None else []
            self._known[job.job_id] = _Known(job.restarts, runs, False, now, now)
            return runs
        self._known[job.job_id] = _Known(job.restarts, runs, len(runs) >= job.restarts, now, now)
        return runs
