"""`hase schedd reset`: take our Nice/Features back off pending jobs we touched.

Only attributes that still hold exactly what we set are put back (Nice -> 0; Features -> the
constraint hsbatch added at submission, as the job's description records it, else ""), so
anything a user changed since is kept. Slurm then schedules as if the daemon never ran.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from slurm_hase.daemon.safety import OwnedAttrs, submitted_constraint
from slurm_hase.errors import JobNotFoundError, SlurmCommandError, SlurmUnavailableError
from slurm_hase.slurm.backend import SlurmBackend
from slurm_hase.slurm.types import Job, JobState, JobUpdate

log = logging.getLogger("slurm_hase.daemon")


@dataclass(frozen=True)
class ResetOutcome:
    """What reset did for one job we had touched."""

    job_id: str
    update: JobUpdate | None
    outcome: str  # reset | unchanged | gone | error
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
    (one moved out of the daemon's partitions still carries them); SlurmUnavailableError
    propagates."""
    jobs = {j.job_id: j for j in backend.jobs()}
    out: list[ResetOutcome] = []
    for job_id, mine in sorted(owned.items()):
        job = jobs.get(job_id)
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
        try:
            backend.update_job(job_id, update)
        except SlurmUnavailableError:
            raise
        except JobNotFoundError:
            out.append(ResetOutcome(job_id, None, "gone", "finished before reset"))
            continue
        except SlurmCommandError as exc:
            log.warning("job %s: reset refused: %s", job_id, exc)
            out.append(ResetOutcome(job_id, update, "error", exc.stderr))
            continue
        out.append(ResetOutcome(job_id, update, "reset"))
    return out
