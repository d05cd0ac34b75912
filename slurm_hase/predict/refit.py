"""Refit: turn completed jobs (sacct runtime + the descriptor in their comment) into measurements
and retrain on the base data plus those."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from slurm_hase.errors import DescriptorError, PredictorError
from slurm_hase.predict.api import Predictor
from slurm_hase.predict.catalog import resolve_gpu
from slurm_hase.predict.dataset import Measurement, make
from slurm_hase.predict.descriptor import WorkloadDescriptor
from slurm_hase.slurm.tres import mps_from_tres
from slurm_hase.slurm.types import AccountingRecord, JobState


class AccountingSource(Protocol):
    """The part of SlurmBackend refit needs."""

    def accounting(
        self, *, since: str = "now-1day", until: str = "now", job_ids: Sequence[str] = ()
    ) -> list[AccountingRecord]: ...


# a measured iteration time this many times off the current model's P50 (either way) is taken
# for a broken measurement (a sleep job, wrong iteration count), not for the site's hardware
MAX_RATIO = 10.0
IMPLAUSIBLE = "implausible iteration time"


@dataclass(frozen=True)
class Outlier:
    """A harvested row dropped as implausible, with the reference model's P50 for it."""

    row: Measurement
    predicted_s: float

    @property
    def ratio(self) -> float:
        """How many times off the prediction, either way (>= 1)."""
        r = self.row.iter_time_s / self.predicted_s
        return max(r, 1.0 / r)

    def describe(self) -> str:
        """'a100 resnet50 bs64 (site:sacct:17): 0.0027 s measured vs 0.123 s predicted, 45x faster'."""
        m = self.row
        bs = f" bs{m.desc.batch_size}" if m.desc.batch_size else ""
        way = "faster" if m.iter_time_s < self.predicted_s else "slower"
        return (f"{m.gpu} {m.model}{bs} ({m.source or 'no source'}): {m.iter_time_s:.3g} s/iteration measured "
                f"vs {self.predicted_s:.3g} s predicted, {self.ratio:.0f}x {way}")


@dataclass(frozen=True)
class Harvest:
    """Measurements taken from sacct and why the other jobs were skipped (reason -> count)."""

    rows: list[Measurement]
    skipped: dict[str, int]
    worst: Outlier | None = None  # the furthest-off row dropped as implausible
    max_ratio: float | None = None  # the plausibility bound applied (None: none)

    @property
    def implausible(self) -> int:
        """Rows dropped by the plausibility filter."""
        return self.skipped.get(IMPLAUSIBLE, 0)

    def skipped_text(self) -> str:
        """'no descriptor: 3, not completed: 8' (or 'none')."""
        return ", ".join(f"{k}: {v}" for k, v in sorted(self.skipped.items())) or "none"

    def require_rows(self) -> None:
        """PredictorError (naming the skip counts) when no job gave a usable row: nothing to refit on."""
        if not self.rows:
            raise PredictorError("no usable finished jobs with a workload description in the window "
                                 f"(skipped {self.skipped_text()}); model unchanged")


RESUMED = "resumed after a requeue"
SHARED = "ran under an MPS share"
GPUS_DIFFER = "held another GPU count than its description says"


def record_to_measurement(rec: AccountingRecord, requeued: bool = False) -> Measurement | str:
    """A measurement from one finished job, or the reason it cannot give one. ``requeued``: sacct
    lists earlier runs of the same job id; a checkpointing job (``ckpt``) then resumed, so its
    last run did only part of the iterations and elapsed / iterations would read too fast. A job
    that ran under an MPS share gives none either: the row would pass for an exclusive run."""
    if rec.state != JobState.COMPLETED:
        return "not completed"
    try:
        desc = WorkloadDescriptor.from_comment(rec.comment)
    except DescriptorError:
        return "bad descriptor"
    if desc is None:
        return "no descriptor"
    if not desc.iterations:
        return "no iterations"
    if requeued and desc.checkpoint:
        return RESUMED
    # an MPS share (--hase-mps below 100, or Slurm's --gres=mps:N) caps the job's SMs and may put
    # unknown co-runners beside it: its time is not an exclusive run's
    if (desc.mps_share is not None and desc.mps_share < 100) or mps_from_tres(rec.alloc_tres) > 0:
        return SHARED
    if rec.elapsed_s <= 0:
        return "no elapsed time"
    typed = {k: v for k, v in rec.alloc_gpus.items() if k and k != "gpu"}
    if len(typed) != 1:
        return "not one GPU type"
    gpu_name, held = next(iter(typed.items()))
    if held != desc.num_gpus:
        # the description's gpus= is what the row would record; the time is of the GPUs held
        return GPUS_DIFFER
    try:
        gpu = resolve_gpu(gpu_name).key
        return make(gpu, desc.model, desc.gflops_per_iter, desc.params_m, desc.batch_size,
                    desc.precision, desc.mode, desc.num_gpus, desc.corunner_gflops,
                    rec.elapsed_s / desc.iterations, f"site:sacct:{rec.job_id}")
    except PredictorError:
        return "unknown GPU type"
    except DescriptorError:
        return "descriptor lacks GFLOPs"


def harvest(records: Iterable[AccountingRecord], reference: Predictor | None = None,
            max_ratio: float = MAX_RATIO) -> Harvest:
    """Measurements from accounting records; with ``reference`` (the model in use), rows more than
    ``max_ratio`` times off its P50 either way are skipped as implausible."""
    rows: list[Measurement] = []
    skipped: dict[str, int] = {}
    records = list(records)
    runs = Counter(rec.job_id for rec in records)  # sacct -D: one record per run of a requeued job
    for rec in records:
        m = record_to_measurement(rec, requeued=runs[rec.job_id] > 1)
        if isinstance(m, str):
            skipped[m] = skipped.get(m, 0) + 1
        else:
            rows.append(m)
    got = Harvest(rows, skipped)
    return got if reference is None else drop_implausible(got, reference, max_ratio)


def drop_implausible(got: Harvest, reference: Predictor, max_ratio: float = MAX_RATIO) -> Harvest:
    """The harvest without rows whose iteration time is more than ``max_ratio`` times off the
    reference model's P50 (either way), counted under ``IMPLAUSIBLE``."""
    if not (math.isfinite(max_ratio) and max_ratio > 1):
        raise PredictorError(f"max ratio {max_ratio!r} must be a number above 1")
    kept: list[Measurement] = []
    worst: Outlier | None = None
    dropped = 0
    for m in got.rows:
        out = Outlier(m, reference.predict(m.desc, [m.gpu])[m.gpu].iter_time_p50)
        if out.ratio <= max_ratio:
            kept.append(m)
            continue
        dropped += 1
        if worst is None or out.ratio > worst.ratio:
            worst = out
    skipped = dict(got.skipped)
    if dropped:
        skipped[IMPLAUSIBLE] = skipped.get(IMPLAUSIBLE, 0) + dropped
    return Harvest(kept, skipped, worst, max_ratio)


def harvest_backend(backend: AccountingSource, since: str = "now-30days", until: str = "now",
                    reference: Predictor | None = None, max_ratio: float = MAX_RATIO) -> Harvest:
    """Measurements from the backend's sacct view (see ``harvest``)."""
    return harvest(backend.accounting(since=since, until=until), reference, max_ratio)


JOB_SOURCE = "site:sacct:"  # the source of a harvested row: JOB_SOURCE + the Slurm job id


def job_id(m: Measurement) -> str | None:
    """The Slurm job id a harvested row came from (its ``site:sacct:<id>`` source), or None for
    a row of any other source."""
    return m.source[len(JOB_SOURCE):] if m.source.startswith(JOB_SOURCE) else None


def one_row_per_job(base: Sequence[Measurement], new: Sequence[Measurement]
                    ) -> tuple[list[Measurement], int]:
    """base + new with one row per harvested job: a job harvested again (a ``--save-rows`` CSV of
    an earlier refit given back as ``--data`` with an overlapping sacct window, or one job twice
    in sacct's output) keeps only its newest row, the last in base + new order (so this harvest's
    over an older file's). Rows of other sources are all kept, in order. Returns (rows, how many
    repeated rows were dropped)."""
    rows = [*base, *new]
    last: dict[str, int] = {}
    for i, m in enumerate(rows):
        jid = job_id(m)
        if jid is not None:
            last[jid] = i
    kept = [m for i, m in enumerate(rows) if (jid := job_id(m)) is None or last[jid] == i]
    return kept, len(rows) - len(kept)


def refit(base: Sequence[Measurement], new: Sequence[Measurement], note: str = "refit") -> Predictor:
    """Retrain on base + new rows (site rows form their own, equally weighted source family),
    one row per harvested job (``one_row_per_job``: the model's note says how many repeats were
    dropped); PredictorError when there are no new rows (that would only retrain the base)."""
    from slurm_hase.predict.train import train

    if not new:
        raise PredictorError("no site rows to refit on; model unchanged")
    rows, repeats = one_row_per_job(base, new)
    why = f" ({repeats} repeated job rows dropped: one row per harvested job)" if repeats else ""
    return train(rows, note=f"{note}: {len(new)} site rows{why}")
