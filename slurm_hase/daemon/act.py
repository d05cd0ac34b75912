"""Carry out planned updates: one scontrol call per job, or batched per identical update.

Batching (``jobid=1,2,3``, accepted by scontrol on 22.05 and 24.11) turns 300 updates into a
handful of calls. A batch that fails for any reason is retried job by job, so every job still
gets its own exact outcome. Batching needs a backend whose update_job passes the id list to
scontrol (CommandBackend does); it is off by default (the simulator's backend takes one id).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from slurm_hase.errors import (
    JobNotFoundError,
    SlurmCommandError,
    SlurmError,
    SlurmTimeoutError,
    SlurmUnavailableError,
)
from slurm_hase.slurm.backend import SlurmBackend
from slurm_hase.slurm.types import JobUpdate

log = logging.getLogger("slurm_hase.daemon")

BATCH_MAX = 100  # job ids per scontrol call
# Substrings of scontrol errors meaning "the job moved on between observe and act".
GONE_MARKERS = ("invalid job id", "job is no longer pending", "already completed",
                 "job has already", "job is not pending", "not found")

Outcome = tuple[str, str]  # ("applied"|"skipped"|"error"|"unavailable"|"unavailable-skip", msg)


def attempt(job_id: str, verb: str, call: Callable[[], None]) -> Outcome:
    """Outcome of one scontrol action on a job (`verb`: update, requeue); never raises for
    Slurm errors."""
    try:
        call()
    except (SlurmUnavailableError, SlurmTimeoutError) as exc:
        # a hung slurmctld as an unreachable one: each further call would wait the timeout out
        return "unavailable", str(exc)
    except JobNotFoundError:
        log.info("job %s: gone between observe and act", job_id)
        return "skipped", f"job gone before {verb}"
    except SlurmCommandError as exc:
        if any(m in exc.stderr.lower() for m in GONE_MARKERS):
            log.info("job %s: no longer pending (%s)", job_id, exc.stderr)
            return "skipped", f"job moved on: {exc.stderr}"
        log.warning("job %s: %s refused: %s", job_id, verb, exc)
        return "error", str(exc)
    except SlurmError as exc:  # parse errors and the like: count, keep going
        log.warning("job %s: %s failed: %s", job_id, verb, exc)
        return "error", str(exc)
    return "applied", ""


def apply_one(backend: SlurmBackend, job_id: str, update: JobUpdate) -> Outcome:
    """Outcome of one update; never raises for Slurm errors."""
    return attempt(job_id, "update", lambda: backend.update_job(job_id, update))


def apply_updates(backend: SlurmBackend, planned: Sequence[tuple[str, JobUpdate]], *,
                  workers: int = 1, batch: bool = False) -> list[Outcome]:
    """One outcome per planned update, in order; stops calling Slurm once it is unavailable."""
    down = threading.Event()

    def single(job_id: str, update: JobUpdate) -> Outcome:
        if down.is_set():
            return "unavailable-skip", "slurm unavailable"
        out = apply_one(backend, job_id, update)
        if out[0] == "unavailable":
            down.set()
        return out

    def group(item: tuple[tuple[str, ...], JobUpdate]) -> list[Outcome]:
        ids, update = item
        if len(ids) > 1 and not down.is_set():
            try:
                backend.update_job(",".join(ids), update)
                return [("applied", "")] * len(ids)
            except (SlurmUnavailableError, SlurmTimeoutError) as exc:
                # scontrol works through the list job by job: any of them may have been
                # updated before it timed out or lost slurmctld, so each outcome is unknown
                down.set()
                return [("unavailable", str(exc))] * len(ids)
            except SlurmError as exc:
                log.info("batch of %d failed (%s); retrying one by one", len(ids), exc)
        return [single(j, update) for j in ids]

    items: list[tuple[tuple[str, ...], JobUpdate]]
    if batch:
        by_update: dict[JobUpdate, list[str]] = {}
        for job_id, update in planned:
            by_update.setdefault(update, []).append(job_id)
        items = [(tuple(ids[i:i + BATCH_MAX]), upd) for upd, ids in by_update.items()
                 for i in range(0, len(ids), BATCH_MAX)]
    else:
        items = [((job_id,), update) for job_id, update in planned]
    if workers > 1 and len(items) > 1:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(group, items))
    else:
        results = [group(it) for it in items]
    by_job = {j: o for (ids, _), outs in zip(items, results, strict=True)
              for j, o in zip(ids, outs, strict=True)}
    return [by_job[job_id] for job_id, _ in planned]
