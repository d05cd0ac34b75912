"""Refit: turn completed jobs (sacct runtime + the descriptor in their comment) into measurements
and retrain on the base data plus those."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from slurm_hase.errors import DescriptorError, PredictorError
from slurm_hase.predict.api import Predictor
from slurm_hase.predict.catalog import resolve_gpu
from slurm_hase.predict.dataset import Measurement, make
from slurm_hase.predict.descriptor import WorkloadDescriptor
from slurm_hase.slurm.types import AccountingRecord, JobState


class AccountingSource(Protocol):
    """The part of SlurmBackend refit needs."""

    def accounting(
        self, *, since: str = "now-1day", until: str = "now", job_ids: Sequence[str] = ()
    ) -> list[AccountingRecord]: ...


@dataclass(frozen=True)
class Harvest:
    """Measurements taken from sacct and why the other jobs were skipped."""

    rows: list[Measurement]
    skipped: dict[str, int]


def record_to_measurement(rec: AccountingRecord) -> Measurement | str:
    """A measurement from one finished job, or the reason it cannot give one."""
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
    if rec.elapsed_s <= 0:
        return "no elapsed time"
    typed = {k: v for k, v in rec.alloc_gpus.items() if k and k != "gpu"}
    if len(typed) != 1:
        return "not one GPU type"
    gpu_name = next(iter(typed))
    try:
        gpu = resolve_gpu(gpu_name).key
        return make(gpu, desc.model, desc.gflops_per_iter, desc.params_m, desc.batch_size,
                    desc.precision, desc.mode, desc.num_gpus, desc.corunner_gflops,
                    rec.elapsed_s / desc.iterations, f"site:sacct:{rec.job_id}")
    except PredictorError:
        return "unknown GPU type"
    except DescriptorError:
        return "descriptor lacks GFLOPs"


def harvest(records: Iterable[AccountingRecord]) -> Harvest:
    """Measurements from accounting records."""
    rows: list[Measurement] = []
    skipped: dict[str, int] = {}
    for rec in records:
        m = record_to_measurement(rec)
        if isinstance(m, str):
            skipped[m] = skipped.get(m, 0) + 1
        else:
            rows.append(m)
    return Harvest(rows, skipped)


def harvest_backend(backend: AccountingSource, since: str = "now-30days", until: str = "now") -> Harvest:
    """Measurements from the backend's sacct view."""
    return harvest(backend.accounting(since=since, until=until))


def refit(base: Sequence[Measurement], new: Sequence[Measurement], note: str = "refit") -> Predictor:
    """Retrain on base + new rows (site rows form their own, equally weighted source family)."""
    from slurm_hase.predict.train import train

    return train([*base, *new], note=f"{note}: {len(new)} site rows")
