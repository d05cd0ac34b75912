"""Trace loaders: Philly (Sia/Pollux form), Gavel traces, Alibaba 2023 GPU pods.

Every loader returns TraceJob rows sorted by submit time, submit times relative to the first
job (0 s). ``duration_s`` is the job's runtime on the reference GPU type (v100, see
throughput.py); a duration below 1 s (0 included) counts as 1 s. Bad rows raise DataError
naming the file and its line number (1 = the first line, a CSV's header) and the column.
``source`` keeps where each job came from: ``line N`` of the file, or an Alibaba pod's name.
Account names are interned: the same object for every job of an account, so the passes over a
deep queue that hash or compare them read one string, not one per job.

Mappings (documented, deterministic; randomness only through the caller's Generator):

* Philly (and a site's own CSV): columns ``timestamp`` (ISO 8601 date and time, UTC unless it
  has an offset, or bare seconds such as epoch seconds), ``duration`` (s), ``num_gpus``,
  ``cluster`` (the account); account = ``vc-<cluster>``, user = account; a Gavel job type is
  drawn uniformly per job among the types measured at its scale factor (as Gavel does for
  Philly).
* Gavel traces: the job type and steps are the trace's; duration = steps / v100 steps/s;
  account = one of ``n_accounts`` ``acct<i>`` drawn uniformly (Gavel has no accounts).
* Alibaba 2023 pods: account = QoS class; ``gpu_milli`` < 1000 on a 1-GPU pod is an MPS share;
  ``gpu_spec`` becomes a Features OR-constraint (V100M16/V100M32 -> v100, P100 -> p100,
  T4 -> t4, A10 -> a10; anonymised G2/G3 are dropped); CPU-only pods and pods never
  scheduled are skipped (counted: `note`); duration = deletion - scheduled time.

Limits (refused with the row): times and durations up to MAX_SECONDS (10 years; the engine
samples every 10 simulated minutes over the whole span), at most MAX_JOB_GPUS GPUs per job.
Files must be UTF-8 text (a byte order mark, as Excel writes, is allowed).
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import math
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from slurm_hase.errors import DataError, not_utf8
from slurm_hase.sim.throughput import REFERENCE_TYPE, ThroughputTable

CLIP_QUANTILE = 0.95  # offered_load counts each job's work at most at this quantile
# Bounds on input numbers: beyond them a run would take years of samples or all memory.
MAX_SECONDS = 3650 * 86400.0  # submit times, their span and durations: 10 years
MAX_JOB_GPUS = 1_000_000  # GPUs one job asks for (a cluster has at most this many per type)
LIMIT_TEXT = f"{MAX_SECONDS:,.0f} s (10 years)"

ALIBABA_TYPES: dict[str, str | None] = {
    "V100M16": "v100", "V100M32": "v100", "P100": "p100", "T4": "t4", "A10": "a10",
    "G2": None, "G3": None,
}


TRACE_KINDS = ("philly", "gavel", "alibaba")
PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus", "cluster")
TIME_FORMAT = ("an ISO 8601 date and time such as 2017-10-01 00:00:00 (UTC unless it has an "
               "offset such as +08:00) or seconds such as 1506816000 (epoch seconds)")
_SECONDS = re.compile(r"\d+(\.\d*)?")


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace, before simulation."""

    job_id: str
    submit_s: float
    account: str
    user: str
    num_gpus: int
    duration_s: float  # runtime on the reference type
    gpu_fraction: float = 1.0
    workload: str = ""  # Gavel job type ("ResNet-50 (batch size 64)")
    constraint: tuple[str, ...] = ()  # allowed GPU types from the trace (OR), () = any
    pinned: str | None = None
    checkpoint: bool = False  # opted in to checkpoint + requeue (descriptor checkpoint=yes)
    may_share: bool = False  # opted in to MPS pairing while it waits (descriptor share=yes)
    source: str = ""  # where in the trace file: "line 12", or an Alibaba pod's name


def _not_utf8(path: Path) -> DataError:
    """DataError naming the line and file offset of the first byte of `path` that is not UTF-8."""
    data = path.read_bytes()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        return DataError(f"{path}: line {line}: {not_utf8(exc)}")
    return DataError(f"{path}: not UTF-8 text")  # (the decoder said so; a race)


def _rows(path: Path, required: Sequence[str], kind: str,
          delimiter: str = ",") -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row) of a CSV file (a header line, then one row per record); DataError
    for a missing header column (listing the columns found), a row too short to have a
    required column, or bytes that are not UTF-8 (with their line)."""
    try:
        handle = path.open(newline="", encoding="utf-8-sig")
    except OSError as exc:
        raise DataError(f"{path}: cannot open trace: {exc}") from None
    with handle:
        try:
            reader = csv.DictReader(handle, delimiter=delimiter)
            found = [c for c in reader.fieldnames or [] if c]
            missing = [c for c in required if c not in found]
            if missing:
                raise DataError(
                    f"{path}: line 1: header: missing column(s) {', '.join(missing)}; found "
                    f"{', '.join(repr(c) for c in found) if found else 'no header'}; a {kind} "
                    f"trace needs {', '.join(required)} (docs/simulator.md; --trace-kind "
                    f"{'|'.join(TRACE_KINDS)} picks the format)")
            for row in reader:
                n = reader.line_num
                if not any((v or "").strip() for v in row.values() if isinstance(v, str)):
                    continue
                if absent := [c for c in required if row.get(c) is None]:
                    have = sum(1 for k, v in row.items() if k is not None and v is not None)
                    raise DataError(f"{path}: line {n}: column {absent[0]!r}: missing (the row "
                                    f"has {have} of the header's {len(reader.fieldnames or [])} "
                                    "columns)")
                yield n, row
        except UnicodeDecodeError:
            raise _not_utf8(path) from None


def _num(path: Path, n: int, row: dict[str, str], col: str, *, minimum: float = 0.0,
         maximum: float = math.inf) -> float:
    text = (row.get(col) or "").strip()
    where = f"{path}: line {n}: column {col!r}"
    try:
        value = float(text)
    except ValueError:
        raise DataError(f"{where}: not a number: {text!r}") from None
    if not math.isfinite(value):
        raise DataError(f"{where}: {text!r} is not a finite number")
    if value < minimum:
        raise DataError(f"{where}: {value:g} is negative" if minimum == 0 else
                        f"{where}: {value:g} is below {minimum:g}")
    if value > maximum:
        raise DataError(f"{where}: {value:g} is over the simulator's limit of "
                        f"{LIMIT_TEXT if maximum == MAX_SECONDS else f'{maximum:g}'}")
    return value


def _whole(path: Path, n: int, row: dict[str, str], col: str, minimum: int) -> int:
    """A whole number from `minimum` to MAX_JOB_GPUS (a GPU count); DataError naming the line."""
    text = (row.get(col) or "").strip()
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value.is_integer() and minimum <= value <= MAX_JOB_GPUS):
        raise DataError(f"{path}: line {n}: column {col!r}: must be a whole number from "
                        f"{minimum} to {MAX_JOB_GPUS:,}, got {text!r}")
    return int(value)


def parse_time(text: str) -> float:
    """Seconds since the epoch of a trace time: ISO 8601 (UTC unless it carries an offset;
    never the host's time zone) or bare non-negative seconds. ValueError if neither."""
    text = text.strip()
    if _SECONDS.fullmatch(text):
        return float(text)
    when = dt.datetime.fromisoformat(text)
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


def load_philly(path: Path, table: ThroughputTable, rng: np.random.Generator) -> list[TraceJob]:
    """The Philly job list as Sia/Pollux ship it (timestamp,duration,num_gpus,...,cluster),
    or a site's own CSV with those columns (module doc)."""
    raw: list[tuple[float, float, int, str, int]] = []
    for n, row in _rows(path, PHILLY_COLUMNS, "philly"):
        try:
            ts = parse_time(row["timestamp"])
        except ValueError:
            raise DataError(f"{path}: line {n}: column 'timestamp': bad time "
                            f"{row['timestamp']!r}: expected {TIME_FORMAT}") from None
        dur = _num(path, n, row, "duration", maximum=MAX_SECONDS)
        gpus = _whole(path, n, row, "num_gpus", 1)
        vc = row["cluster"].strip() or "none"
        raw.append((ts, max(dur, 1.0), gpus, sys.intern(f"vc-{vc}"), n))
    raw.sort(key=lambda r: r[0])
    t0 = raw[0][0] if raw else 0.0
    if raw and raw[-1][0] - t0 > MAX_SECONDS:
        raise DataError(f"{path}: line {raw[-1][4]}: column 'timestamp': "
                        f"{raw[-1][0] - t0:,.0f} s after the first job's (line {raw[0][4]}), "
                        f"over the simulator's limit of {LIMIT_TEXT}")
    out = []
    for i, (ts, dur, gpus, acct, n) in enumerate(raw, start=1):
        jt = _draw_type(table, gpus, rng)
        out.append(TraceJob(str(i), ts - t0, acct, acct, gpus, dur, workload=jt,
                            source=f"line {n}"))
    return out


def _draw_type(table: ThroughputTable, gpus: int, rng: np.random.Generator) -> str:
    sf = 1
    for cand in (1, 2, 4, 8):
        if cand <= gpus:
            sf = cand
    types = table.job_types(sf) or table.job_types(1)
    return types[int(rng.integers(len(types)))]


def _lines(path: Path) -> list[str]:
    """The lines of a text file (universal newlines: line N is what an editor shows as N)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DataError(f"{path}: cannot open trace: {exc}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise _not_utf8(path) from None
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def load_gavel(path: Path, table: ThroughputTable, rng: np.random.Generator,
               n_accounts: int = 4) -> list[TraceJob]:
    """A Gavel trace (10-column physical_cluster form or 7-column msr form, TSV)."""
    rows = []
    for n, line in enumerate(_lines(path), start=1):
        if not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) == 10:
            jt, steps_s, sf_s, arr_s = cols[0], cols[5], cols[6], cols[9]
        elif len(cols) == 7:
            jt, steps_s, arr_s, sf_s = cols[0], cols[4], cols[5], cols[6]
        else:
            raise DataError(f"{path}: line {n}: expected 7 or 10 tab-separated columns, got "
                            f"{len(cols)}")
        vals = {"total_steps": steps_s, "arrival_time": arr_s, "scale_factor": sf_s}
        steps = _num(path, n, vals, "total_steps")
        arrival = _num(path, n, vals, "arrival_time", maximum=MAX_SECONDS)
        sf = _whole(path, n, vals, "scale_factor", 1)
        tput = table.isolated[REFERENCE_TYPE].get((jt, table.scale_factor(jt, sf)))
        if not tput:
            raise DataError(f"{path}: line {n}: job type {jt!r} has no {REFERENCE_TYPE} "
                            "throughput")
        if steps / tput > MAX_SECONDS:
            raise DataError(f"{path}: line {n}: column 'total_steps': {steps:g} steps take "
                            f"{steps / tput:,.0f} s on {REFERENCE_TYPE}, over the simulator's "
                            f"limit of {LIMIT_TEXT}")
        rows.append((arrival, max(steps / tput, 1.0), sf, jt, n))
    rows.sort(key=lambda r: r[0])
    t0 = rows[0][0] if rows else 0.0
    out = []
    for i, (arr, dur, sf, jt, n) in enumerate(rows, start=1):
        acct = sys.intern(f"acct{int(rng.integers(max(n_accounts, 1)))}")
        out.append(TraceJob(str(i), arr - t0, acct, acct, sf, dur, workload=jt,
                            source=f"line {n}"))
    return out


ALIBABA_COLUMNS = ("name", "num_gpu", "gpu_milli", "gpu_spec", "qos", "creation_time",
                   "deletion_time", "scheduled_time")


def load_alibaba(path: Path, table: ThroughputTable, rng: np.random.Generator,
                 note: Callable[[str], None] | None = None) -> list[TraceJob]:
    """Alibaba cluster-trace-gpu-v2023 pod list (openb_pod_list_*.csv). `note` gets one line
    counting the pods skipped (CPU-only, never scheduled) when there are any; DataError with
    those counts when no pod is left."""
    raw = []
    cpu_only = never = 0
    for n, row in _rows(path, ALIBABA_COLUMNS, "alibaba"):
        gpus = _whole(path, n, row, "num_gpu", 0)
        milli = _num(path, n, row, "gpu_milli")
        created = _num(path, n, row, "creation_time", maximum=MAX_SECONDS)
        sched = (_num(path, n, row, "scheduled_time", maximum=MAX_SECONDS)
                 if row["scheduled_time"].strip() else 0.0)
        deleted = (_num(path, n, row, "deletion_time", maximum=MAX_SECONDS)
                   if row["deletion_time"].strip() else 0.0)
        if gpus <= 0:
            cpu_only += 1
            continue
        if deleted <= 0 or (sched <= 0 and created > 0):
            never += 1
            continue
        begin = sched if sched > 0 else created
        if deleted < begin:
            raise DataError(f"{path}: line {n}: negative duration ({deleted:g} < {begin:g})")
        frac = min(milli / 1000.0, 1.0) if gpus == 1 and 0 < milli < 1000 else 1.0
        spec = tuple(dict.fromkeys(
            t for s in row["gpu_spec"].split("|") if s.strip()
            for t in [ALIBABA_TYPES.get(s.strip(), s.strip().lower())] if t))
        acct = sys.intern(row["qos"].strip() or "none")
        pod = row["name"].strip() or f"line {n}"
        raw.append((created, max(deleted - begin, 1.0), gpus, frac, spec, acct, pod))
    skipped = (f"{cpu_only} CPU-only pod{'s' * (cpu_only != 1)} and {never} never-scheduled "
               f"pod{'s' * (never != 1)} were skipped")
    if not raw:
        raise DataError(f"{path}: the trace has no jobs" + (f": {skipped}" if cpu_only + never
                                                             else ""))
    if note is not None and cpu_only + never:
        note(f"{path.name}: {skipped} ({len(raw)} GPU pods kept)")
    raw.sort(key=lambda r: r[0])
    t0 = raw[0][0]
    out = []
    for i, (created, dur, gpus, frac, spec, acct, pod) in enumerate(raw, start=1):
        out.append(TraceJob(str(i), created - t0, acct, acct, gpus, dur, frac,
                            _draw_type(table, gpus if frac >= 1 else 1, rng), spec,
                            source=pod))
    return out


def detect_kind(path: Path) -> str:
    """The trace kind `auto` means for `path`: gavel for a name ending .trace, alibaba for a
    name containing pod_list or alibaba, else philly (the CSV form a site's trace takes)."""
    name = path.name.lower()
    if name.endswith(".trace"):
        return "gavel"
    if "pod_list" in name or "alibaba" in name:
        return "alibaba"
    return "philly"


def load_trace(path: Path, table: ThroughputTable, rng: np.random.Generator,
               kind: str = "auto", note: Callable[[str], None] | None = None) -> list[TraceJob]:
    """Load any supported trace; `kind` auto-detects from the file name (detect_kind).
    `note` gets a line about rows a loader skipped on purpose (Alibaba's CPU-only pods)."""
    if kind == "auto":
        kind = detect_kind(path)
    if kind == "alibaba":
        return load_alibaba(path, table, rng, note)
    if kind == "philly":
        return load_philly(path, table, rng)
    if kind == "gavel":
        return load_gavel(path, table, rng)
    raise DataError(f"unknown trace kind {kind!r} (known: {', '.join(sorted(TRACE_KINDS))})")


def offered_load(jobs: Sequence[TraceJob], total_gpus: float) -> float:
    """GPU-seconds asked (reference runtimes) / (GPUs * arrival span).

    Pass the cluster's capacity in reference-GPU equivalents (see report.capacity) so that a
    load of 1.0 means the cluster is exactly busy at median speeds. Each job's GPU-seconds
    are clipped at the CLIP_QUANTILE of the trace (robust to a heavy tail)."""
    if not jobs or total_gpus <= 0:
        return 0.0
    span = max(jobs[-1].submit_s - jobs[0].submit_s, 1.0)
    works = np.array([j.num_gpus * j.gpu_fraction * j.duration_s for j in jobs])
    # Philly's tail (a few jobs of weeks on many GPUs) would otherwise set the load alone and
    # leave every other job an empty cluster: each job's work counts at most the p95 job's.
    works = np.minimum(works, np.quantile(works, CLIP_QUANTILE))
    return float(works.sum()) / (total_gpus * span)


def window(jobs: Sequence[TraceJob], start: int = 0, count: int | None = None) -> list[TraceJob]:
    """`count` consecutive jobs from index `start`, submit times shifted to begin at 0."""
    part = list(jobs[start:None if count is None else start + count])
    if not part:
        return []
    t0 = part[0].submit_s
    return [dataclasses.replace(j, submit_s=j.submit_s - t0) for j in part]


def tile(jobs: Sequence[TraceJob], count: int) -> list[TraceJob]:
    """Repeat the trace back to back (each copy shifted by the span) until `count` jobs."""
    if not jobs:
        return []
    span = jobs[-1].submit_s - jobs[0].submit_s + 1.0
    out: list[TraceJob] = []
    rep = 0
    while len(out) < count:
        for j in jobs:
            if len(out) >= count:
                break
            out.append(dataclasses.replace(j, job_id=str(len(out) + 1), submit_s=j.submit_s + rep * span))
        rep += 1
    return out


def scale_to_load(jobs: Sequence[TraceJob], total_gpus: float, load: float) -> list[TraceJob]:
    """Compress or stretch arrival times so offered_load == `load` (unless that would leave
    them less than 1 s apart, offered_load's least span)."""
    current = offered_load(jobs, total_gpus)
    if current <= 0 or load <= 0:
        return list(jobs)
    factor = current / load
    span = jobs[-1].submit_s - jobs[0].submit_s
    if 0 < span < 1.0:  # offered_load took this span as 1 s: stretch by the rest too
        factor /= span
    return [dataclasses.replace(j, submit_s=j.submit_s * factor) for j in jobs]
