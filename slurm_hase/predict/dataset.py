"""The canonical measurement table: one row per (workload, GPU type) with a measured iteration time.

CSV columns: gpu, model, gflops_per_iter, params_m, batch_size, precision, mode, num_gpus,
corunner_gflops (``;``-separated, empty = exclusive), iter_time_s; optional ``source``.
``gflops_per_iter`` and ``batch_size`` are per GPU (local batch).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from slurm_hase.errors import DataError, DescriptorError, PredictorError
from slurm_hase.predict.catalog import DATA_DIR, resolve_gpu
from slurm_hase.predict.descriptor import WorkloadDescriptor
from slurm_hase.predict.models import fill

COLUMNS: tuple[str, ...] = (
    "gpu", "model", "gflops_per_iter", "params_m", "batch_size", "precision", "mode", "num_gpus",
    "corunner_gflops", "iter_time_s",
)
REQUIRED: tuple[str, ...] = ("gpu", "iter_time_s")
MAX_ROWS = 2_000_000


@dataclass(frozen=True)
class Measurement:
    """One measured iteration time; ``desc`` has GFLOPs filled in."""

    gpu: str
    desc: WorkloadDescriptor
    iter_time_s: float
    source: str = ""

    @property
    def model(self) -> str:
        """Model name, or a GFLOPs tag when the row has none."""
        return self.desc.model or f"gflops={self.desc.gflops_per_iter:.4g}"


def make(
    gpu: str, model: str | None, gflops: float | None, params_m: float | None,
    batch_size: int | None, precision: str, mode: str, num_gpus: int,
    corunners: Sequence[float], iter_time_s: float, source: str = "",
) -> Measurement:
    """A validated Measurement with GFLOPs/params filled from the model table."""
    desc = WorkloadDescriptor(model=model, gflops_per_iter=gflops, params_m=params_m,
                              batch_size=batch_size, precision=precision, mode=mode,
                              num_gpus=num_gpus, corunner_gflops=tuple(corunners))
    f = fill(desc)
    desc = WorkloadDescriptor(model=model, gflops_per_iter=f.gflops, params_m=f.params_m,
                              batch_size=f.batch_size, precision=precision, mode=mode,
                              num_gpus=num_gpus, corunner_gflops=tuple(corunners))
    if not (math.isfinite(iter_time_s) and iter_time_s > 0):
        raise DescriptorError(f"iter_time_s: {iter_time_s!r} must be a positive number")
    return Measurement(gpu=resolve_gpu(gpu).key, desc=desc, iter_time_s=iter_time_s, source=source)


def _opt(row: dict[str, str], key: str) -> str | None:
    v = (row.get(key) or "").strip()
    return v or None


SHIPPED_DATA = "shipped"  # names the packaged training CSV wherever --data is asked for
SHIPPED_CSV = "train_shipped.csv"  # in the package's data folder (catalog.DATA_DIR)


def data_path(path: str | Path) -> Path:
    """A --data value as a path: ``shipped`` is the packaged training CSV (a file of that name
    in the working folder: give ``./shipped``)."""
    return DATA_DIR / SHIPPED_CSV if str(path) == SHIPPED_DATA else Path(path)


def read_csv(path: str | Path) -> list[Measurement]:
    """Read and validate a canonical CSV (``shipped``: the packaged one); DataError names the
    file, row and column."""
    p = data_path(path)
    try:
        # utf-8-sig: a spreadsheet's "CSV UTF-8" export starts with a byte-order mark, which
        # would otherwise stick to the first column's name ("\ufeffgpu")
        text = p.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{p}: cannot read ({exc})") from None
    return parse_csv(text, str(p))


def parse_csv(text: str, origin: str = "<csv>") -> list[Measurement]:
    """Parse canonical CSV text (row numbers count the header as row 1)."""
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip() for h in (reader.fieldnames or [])]
    reader.fieldnames = header
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise DataError(f"{origin}: missing required column(s) {', '.join(missing)} (have: {', '.join(header) or 'nothing'})")
    if "gflops_per_iter" not in header and "model" not in header:
        raise DataError(f"{origin}: needs a gflops_per_iter or a model column")
    out: list[Measurement] = []
    for i, row in enumerate(reader, start=2):
        if i > MAX_ROWS:
            raise DataError(f"{origin}: more than {MAX_ROWS} rows")
        try:
            out.append(_parse_row(row))
        except (DescriptorError, PredictorError, ValueError) as exc:
            raise DataError(f"{origin}: row {i}: {exc}") from None
    if not out:
        raise DataError(f"{origin}: no data rows")
    return out


def _num(row: dict[str, str], key: str) -> float | None:
    v = _opt(row, key)
    return None if v is None else _number(key, v)


def _number(key: str, text: str) -> float:
    """``text`` as a float; ValueError naming the column otherwise."""
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{key}: {text.strip()!r} is not a number") from None


def _int(row: dict[str, str], key: str) -> int | None:
    f = _num(row, key)
    if f is None:
        return None
    if not f.is_integer():
        raise ValueError(f"{key}: {f!r} is not an integer")
    if f <= 0:
        raise ValueError(f"{key}: {int(f)} must be positive")
    return int(f)


def _parse_row(row: dict[str, str]) -> Measurement:
    gpu = _opt(row, "gpu")
    if gpu is None:
        raise ValueError("gpu: empty")
    target = _num(row, "iter_time_s")
    if target is None:
        raise ValueError("iter_time_s: empty")
    co_text = _opt(row, "corunner_gflops") or ""
    co = tuple(_number("corunner_gflops", x) for x in co_text.replace(",", ";").split(";") if x.strip())
    return make(
        gpu=gpu, model=_opt(row, "model"), gflops=_num(row, "gflops_per_iter"),
        params_m=_num(row, "params_m"), batch_size=_int(row, "batch_size"),
        precision=(_opt(row, "precision") or "fp32").lower(), mode=(_opt(row, "mode") or "train").lower(),
        num_gpus=_int(row, "num_gpus") or 1, corunners=co, iter_time_s=target,
        source=_opt(row, "source") or "",
    )


def _fmt(x: float | None) -> str:
    return "" if x is None else f"{x:.6g}"


def csv_text(rows: Iterable[Measurement]) -> tuple[str, int]:
    """The canonical CSV text of rows (plus ``source``) and the row count."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([*COLUMNS, "source"])
    n = 0
    for m in rows:
        d = m.desc
        w.writerow([m.gpu, d.model or "", _fmt(d.gflops_per_iter), _fmt(d.params_m),
                    d.batch_size or "", d.precision, d.mode, d.num_gpus,
                    ";".join(_fmt(c) for c in d.corunner_gflops), f"{m.iter_time_s:.6g}", m.source])
        n += 1
    return buf.getvalue(), n


def write_csv(rows: Iterable[Measurement], path: str | Path) -> int:
    """Write rows in the canonical format (plus ``source``) atomically; returns the count.

    DataError names the path when it cannot be written (nothing is left behind)."""
    from slurm_hase.predict.files import write_together

    text, n = csv_text(rows)
    write_together([(path, text, DataError)])
    return n


def read_many(paths: Sequence[str | Path]) -> list[Measurement]:
    """Concatenate several canonical CSVs."""
    if not paths:
        raise DataError("no --data files given")
    out: list[Measurement] = []
    for p in paths:
        out.extend(read_csv(p))
    return out
