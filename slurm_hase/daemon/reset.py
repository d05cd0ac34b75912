"""`hase schedd reset`: take our Nice/Features back off pending jobs we touched.

Only attributes that still hold exactly what we set are put back (Nice -> 0; Features -> the
constraint hsbatch added at submission, as the job's description records it, else ""), so
anything a user changed since is kept. Slurm then schedules as if the daemon never ran.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from slurm_hase.daemon.act import apply_one
from slurm_hase.daemon.safety import OwnedAttrs, submitted_constraint
from slurm_hase.slurm.backend import SlurmBackend
from slurm_hase.slurm.types import Job, JobState, JobUpdate

# states in which a job still carries what the daemon set and may be requeued (22.05 shows a
# job requeued moments ago as COMPLETING until its epilog ends)
_NOT_YET_GONE = frozenset({JobState.RUNNING, JobState.SUSPENDED, JobState.COMPLETING})


@dataclass(frozen=True)
class ResetOutcome:
    """What reset did for one job we had touched."""

    job_id: str
    update: JobUpdate | None
    outcome: str  # reset | unchanged | kept (running, suspended, completing) | gone | error
    detail: str = ""


def plan_reset(job_nice: int, job_features: str, mine: OwnedAttrs,
               submitted_features: str = "") -> JobUpdate:
    """The update that puts back what the job had before we set ours (`submitted_features`:
    hsbatch's constraint); empty when nothing of ours is left."""
    nice = 0 if job_nice != 0 and mine.owns_nice(job_nice) else None
    feats = (submitted_features
             if mine.owns_features(job_features) and job_features != submitted_features
             else None)
    return JobUpdate(nice=nice, features=feats)


def reset_update(job: Job, mine: OwnedAttrs) -> JobUpdate:
    """plan_reset for a job as Slurm shows it (hsbatch's constraint read from its comment)."""
    return plan_reset(job.nice, job.features, mine, submitted_constraint(job.comment))


def reset_decisions(backend: SlurmBackend, owned: Mapping[str, OwnedAttrs],
                    dry_run: bool = False) -> list[ResetOutcome]:
    """Clear our attributes from every pending job in `owned`, in whatever partition it is now
    (one moved out of the daemon's partitions still carries them); a running job's are left
    as they are and stay recorded ("kept"; suspended and completing ones too). SlurmUnavailableError from
    reading the jobs propagates; once slurmctld goes away (or hangs) mid-way, that job's outcome
    is unknown and the rest are not tried, each an "error" (kept in the store)."""
    jobs = {j.job_id: j for j in backend.jobs()}
    out: list[ResetOutcome] = []
    down = ""  # slurmctld went away (or hung) mid-way: the rest is not tried
    for job_id, mine in sorted(owned.items()):
        if down:
            out.append(ResetOutcome(job_id, None, "error", f"not tried: {down}"))
            continue
        job = jobs.get(job_id)
        if job is not None and job.state in _NOT_YET_GONE:
            # it still carries what the daemon set and has it again if it is requeued: the
            # record stays, so that a later reset (or the daemon) still knows it as its own
            out.append(ResetOutcome(job_id, None, "kept", f"{job.state.value.lower()}, not "
                                    "pending: kept in the store; reset again once it is "
                                    "requeued"))
            continue
        if job is None or job.state is not JobState.PENDING:
            out.append(ResetOutcome(job_id, None, "gone", "no longer pending"))
            continue
        update = reset_update(job, mine)
        if update.is_empty():
            out.append(ResetOutcome(job_id, None, "unchanged", "user changed it since"))
            continue
        if dry_run:
            out.append(ResetOutcome(job_id, update, "planned"))
            continue
        status, msg = apply_one(backend, job_id, update)
        if status == "applied":
            out.append(ResetOutcome(job_id, update, "reset"))
        elif status == "skipped":  # finished or started since it was read
            out.append(ResetOutcome(job_id, None, "gone", msg))
        elif status == "unavailable":  # it may or may not have landed: kept in the store
            down = msg
            out.append(ResetOutcome(job_id, update, "error", f"outcome unknown: {msg}"))
        else:
            out.append(ResetOutcome(job_id, update, "error", msg))
    return out
