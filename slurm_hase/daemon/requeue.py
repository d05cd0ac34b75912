"""Safety rules and the act step for requeue (rotation) decisions on running jobs.

A policy may ask to requeue a running job (Decision.requeue). The daemon does it only when:
- the admin turned requeue on (CycleConfig.requeue) and the cycle is not a dry run;
- the job is still RUNNING in a managed partition, Slurm may requeue it (Requeue=1) and its
  descriptor says checkpoint=yes (the job resumes from its checkpoint);
- it has run for at least requeue_min_run_s;
- no more than requeue_max jobs are requeued in one cycle.
Everything refused is recorded in `skipped` with the reason. A decision's Nice and GPU types are set
on the job right after the requeue, under the same rules as any pending job's (plan_updates),
so Slurm does not restart it where it just was before the next cycle orders the queue.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from slurm_hase.daemon.act import apply_one, attempt
from slurm_hase.daemon.safety import (
    Capacity,
    OwnedAttrs,
    descriptor_of,
    plan_updates,
    record_intent,
    record_owned,
    restore_owned,
)
from slurm_hase.policy.types import Decision
from slurm_hase.slurm.backend import SlurmBackend
from slurm_hase.slurm.types import Job, JobState, JobUpdate

if TYPE_CHECKING:
    from slurm_hase.daemon.cycle import CycleConfig, CycleResult

log = logging.getLogger("slurm_hase.daemon")


def opted_in(job: Job) -> bool:
    """Slurm may requeue the job and its descriptor says checkpoint=yes."""
    if not job.requeue:
        return False
    desc = descriptor_of(job.comment)
    return desc is not None and desc.checkpoint


def plan_requeues(decisions: Sequence[Decision], jobs: Sequence[Job], now: float,
                  config: CycleConfig, skipped: list[tuple[str, str]],
                  owned: Mapping[str, OwnedAttrs] | None = None,
                  capacity: Capacity | None = None) -> list[tuple[str, JobUpdate | None]]:
    """(job id, update to make once it is pending again) in decision order; refusals go to
    `skipped`. The update (Nice, Features of the decision) passes the same safety rules as
    every pending job's (plan_updates), as if the job were pending already."""
    wanted = [d for d in decisions if d.requeue]
    if not wanted:
        return []
    if not config.requeue:
        skipped.extend((d.job_id, "requeue is off (schedd config requeue = false)") for d in wanted)
        return []
    by_id = {j.job_id: j for j in jobs}
    out: list[tuple[str, JobUpdate | None]] = []
    for d in wanted:
        job = by_id.get(d.job_id)
        why = ""
        if job is None or job.state is not JobState.RUNNING:
            why = "not running"
        elif not opted_in(job):
            why = "not opted in (needs checkpoint=yes and Requeue=1)"
        elif job.start_time is None or now - job.start_time < config.requeue_min_run_s:
            why = f"ran less than {config.requeue_min_run_s:g} s"
        elif len(out) >= config.requeue_max:
            why = f"more than {config.requeue_max} requeues this cycle"
        elif any(d.job_id == j for j, _ in out):
            why = "asked twice"
        if why or job is None:
            skipped.append((d.job_id, f"requeue refused: {why}"))
            continue
        after = plan_updates(
            [replace(d, requeue=False)], [replace(job, state=JobState.PENDING)], owned=owned,
            skipped=skipped, nice_min_delta=config.nice_min_delta, nice_limit=config.nice_limit,
            nice_quantum=config.nice_quantum, nice_scale=config.nice_scale,
            nice_zero=config.nice_zero, capacity=capacity if capacity is not None else Capacity())
        out.append((d.job_id, after[0][1] if after else None))
    return out


def requeue_one(backend: SlurmBackend, job_id: str, observed: Job | None = None
                ) -> tuple[str, str]:
    """("applied"|"skipped"|"error"|"unavailable", message); never raises for Slurm errors.

    `scontrol requeue` also puts a job that has finished or was cancelled back in the queue
    (22.05 and 24.11 alike), so a job that ended since it was observed would run again: the
    job is read again first and requeued only if it is still running. What is left is the
    moment between that read and the requeue. The same read refuses a job whose owner
    revoked the opt-in (checkpoint=yes, Requeue=1) since it was observed, and one that is
    running another run than the `observed` one (requeued and restarted meanwhile: the new
    run has not had its minimum run time)."""
    now: list[Job] = []
    outcome, msg = attempt(job_id, "requeue", lambda: now.append(backend.job(job_id)))
    if outcome != "applied":
        return outcome, msg
    if now[0].state is not JobState.RUNNING:
        log.info("job %s: %s since observed, not requeued", job_id, now[0].state.value)
        return "skipped", f"requeue refused: {now[0].state.value.lower()} since observed"
    if observed is not None and (now[0].start_time, now[0].restarts) != (observed.start_time,
                                                                        observed.restarts):
        log.info("job %s: restarted since observed, not requeued", job_id)
        return "skipped", "requeue refused: restarted since observed"
    if not opted_in(now[0]):  # its owner dropped checkpoint=yes (or Requeue) meanwhile
        log.info("job %s: no longer opted in, not requeued", job_id)
        return "skipped", "requeue refused: no longer opted in since observed"
    return attempt(job_id, "requeue", lambda: backend.requeue(job_id))


def apply_requeues(backend: SlurmBackend, planned: Sequence[tuple[str, JobUpdate | None]],
                   result: CycleResult, owned: MutableMapping[str, OwnedAttrs] | None,
                   intend: Callable[[Mapping[str, OwnedAttrs]], bool] | None = None,
                   observed: Mapping[str, Job] | None = None) -> None:
    """Requeue each job (then update it); record outcomes in `result`; stop once Slurm is
    unavailable. `intend` gets the `owned` entry of each update before it is sent (the daemon
    writes it to its store, as for the cycle's other updates). `observed`: the jobs as the
    cycle read them (requeue_one refuses one restarted since)."""
    for job_id, update in planned:
        outcome, msg = requeue_one(backend, job_id,
                                   observed.get(job_id) if observed is not None else None)
        if outcome == "applied":
            result.requeued.append(job_id)
            log.info("job %s: requeued (rotation)", job_id)
            if update is not None:
                # recorded as intended first, as for any update (cycle._apply): an outcome
                # that is unknown (slurmctld went away) keeps both values as the daemon's
                before = record_intent(owned, job_id, update) if owned is not None else None
                if (owned is not None and intend is not None
                        and not intend({job_id: owned[job_id]})):
                    restore_owned(owned, job_id, before)
                    result.skipped.append((job_id, "update after requeue not sent: the state "
                                           "store could not record it first"))
                    continue
                status, why = apply_one(backend, job_id, update)
                if status == "applied":
                    result.applied.append((job_id, update))
                    record_owned(owned, job_id, update)
                elif status == "unavailable":
                    result.unavailable = True
                    result.errors.append((job_id, why))
                    return
                else:
                    if owned is not None:
                        restore_owned(owned, job_id, before)
                    result.skipped.append((job_id, f"update after requeue: {why}"))
        elif outcome == "skipped":
            result.skipped.append((job_id, msg))
        elif outcome == "unavailable":
            result.unavailable = True
            result.errors.append((job_id, msg))
            return
        else:
            result.errors.append((job_id, msg))

