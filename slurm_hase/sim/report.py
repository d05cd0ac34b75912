"""Run setup shared by `hase simulate` and bench/policies, and result files (JSON/CSV)."""

from __future__ import annotations

import csv
import json
import re
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from slurm_hase.daemon.state import RuntimeEstimator
from slurm_hase.errors import ConfigError, DataError, HaseError, name_some
from slurm_hase.sim.admission import feature_map, refusal, types_allowed
from slurm_hase.sim.cluster import ClusterSpec
from slurm_hase.sim.engine import SimConfig, SimResult, simulate
from slurm_hase.sim.metrics import compute, job_rows
from slurm_hase.sim.throughput import ThroughputTable, load_throughputs
from slurm_hase.sim.traces import (
    LIMIT_TEXT,
    MAX_SECONDS,
    TraceJob,
    load_trace,
    scale_to_load,
    tile,
    window,
)
from slurm_hase.slurm.types import JobState

DEFAULT_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
TRACE_ALIASES = {
    "philly": "sia/philly_jobs_sia.csv",
    "gavel": "gavel/traces__msr__seed=0__2869ce.trace",
    "alibaba": "alibaba/cluster-trace-gpu-v2023__openb_pod_list_gpuspec33.csv",
}


@dataclass(frozen=True)
class TraceSetup:
    """Which trace and how to cut it."""

    path: Path
    kind: str = "auto"
    start: int = 0
    count: int | None = None
    tile_to: int | None = None
    load: float | None = None
    seed: int = 0


# The same file, bundled with the package (MIT; slurm_hase/data/PROVENANCE.md): a clone without
# ../shared still simulates.
PACKAGE_DATA = Path(__file__).resolve().parents[1] / "data"
BUNDLED_THROUGHPUTS = PACKAGE_DATA / "gavel_simulation_throughputs.json"
# Gavel's msr trace (MIT, byte for byte; slurm_hase/data/PROVENANCE.md): `--trace gavel` works
# in a pip install. Philly (no license) and Alibaba (not bundled) need the data directory.
BUNDLED_TRACES = {"gavel": PACKAGE_DATA / "gavel_msr_seed0_2869ce.trace"}


def resolve_trace(name: str, data_dir: Path = DEFAULT_DATA) -> Path:
    """A trace file, or one of the aliases philly/gavel/alibaba inside `data_dir` (a copy of the
    shared data sets); `gavel` falls back to the copy bundled with the package (MIT)."""
    if name in TRACE_ALIASES:
        path = data_dir / TRACE_ALIASES[name]
        if path.is_file():
            return path
        if name in BUNDLED_TRACES:
            return BUNDLED_TRACES[name]
        raise ConfigError(f"trace {name!r}: {TRACE_ALIASES[name]} is not in {data_dir} (pass "
                          "--data-dir DIR, a copy of the public data sets with sia/, gavel/ and "
                          "alibaba/ in it, or a trace file)")
    return Path(name)


def throughput_path(data_dir: Path = DEFAULT_DATA) -> Path:
    """Gavel's simulation_throughputs.json in `data_dir`, else the copy bundled with the package."""
    path = data_dir / "gavel" / "simulation_throughputs.json"
    return path if path.is_file() else BUNDLED_THROUGHPUTS


def throughput_table(data_dir: Path = DEFAULT_DATA) -> ThroughputTable:
    """Gavel's measured throughputs (throughput_path: ../shared/data's, else the bundled copy)."""
    return load_throughputs(throughput_path(data_dir))


def capacity(spec: ClusterSpec, table: ThroughputTable) -> float:
    """The cluster in reference-GPU (v100) equivalents at median measured speeds."""
    return sum(n * table.relative_speed(t) for t, n in spec.gpus_by_type.items())


def prepare_trace(setup: TraceSetup, table: ThroughputTable, spec: ClusterSpec,
                  warn: Callable[[str], None] | None = None,
                  note: Callable[[str], None] | None = None) -> list[TraceJob]:
    """Load, window, tile and scale a trace, deterministically for setup.seed.

    `setup.load` is the offered load against capacity(): v100-seconds asked per second over
    the cluster's v100-equivalent GPUs. `warn` gets a line when the cut leaves fewer jobs than
    asked (--jobs past the trace's end, --tile below the jobs taken); what is simulated is the
    same either way; `note` a line about rows the loader skipped (Alibaba's CPU-only and
    never-scheduled pods). ConfigError when tiling or the load spreads the arrivals over more
    than traces.MAX_SECONDS, or for a load asked of jobs that all arrive at the same time
    (rescaling their arrivals could not change it)."""
    rng = np.random.default_rng(setup.seed)
    jobs = load_trace(setup.path, table, rng, setup.kind, note)
    if not jobs:
        raise DataError(f"{setup.path}: the trace has no jobs")
    if setup.start >= len(jobs):
        raise ConfigError(f"--start {setup.start}: past the end of {setup.path} "
                          f"({len(jobs)} jobs, numbered from 0)")
    total = len(jobs)
    jobs = window(jobs, setup.start, setup.count)
    if warn is not None and setup.count is not None and len(jobs) < setup.count:
        warn(f"--jobs {setup.count} from --start {setup.start}: the trace has {total} jobs, so "
             f"only {len(jobs)} are simulated")
    if setup.tile_to:
        if warn is not None and setup.tile_to < len(jobs):
            warn(f"--tile {setup.tile_to} is below the {len(jobs)} jobs taken from the trace: only "
                 f"the first {setup.tile_to} are simulated (--tile repeats a trace up to N jobs)")
        jobs = tile(jobs, setup.tile_to)
    if setup.load:
        if max(j.submit_s for j in jobs) == min(j.submit_s for j in jobs):  # nothing to stretch
            raise ConfigError(
                f"--load {setup.load:g}: all {len(jobs)} job(s) of the trace cut arrive at the "
                "same time, so no arrival can be moved to change the load; leave --load out "
                "(or take a cut with --start/--jobs whose jobs arrive over time)")
        jobs = scale_to_load(jobs, capacity(spec, table), setup.load)
    span = max(j.submit_s for j in jobs) - min(j.submit_s for j in jobs)
    if span > MAX_SECONDS:
        how = " and ".join(f"--{k} {v:g}" for k, v in (("tile", setup.tile_to),
                                                        ("load", setup.load)) if v)
        raise ConfigError(f"{how or 'the trace'}: the jobs arrive over {span:,.0f} s, over the "
                          f"simulator's limit of {LIMIT_TEXT}")
    if warn is not None and spec.shares:
        seen = sorted({j.account for j in jobs})
        if not set(seen) & set(spec.shares):
            warn(f"the cluster file's [[accounts]] ({', '.join(sorted(spec.shares))}) match none "
                 f"of the trace's accounts ({name_some(seen)}): every account gets share 1")
        elif unnamed := [a for a in seen if a not in spec.shares]:
            warn(f"{len(unnamed)} of the trace's {len(seen)} accounts have no [[accounts]] entry "
                 f"in the cluster file ({name_some(unnamed)}): each gets share 1, beside the "
                 f"shares given to {', '.join(sorted(set(seen) & set(spec.shares)))}")
    return jobs


def prepare_out(out: Path) -> None:
    """Create the results folder `out` and check that a file can be written in it, before any
    simulation runs; ConfigError naming the path (and a part of it that is not a folder)."""
    for part in (out, *out.parents):
        if part.exists():
            if not part.is_dir():
                raise ConfigError(f"{out}: {'it' if part == out else part} is not a directory")
            break
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        raise ConfigError(f"{out}: cannot write the results there: "
                          f"{exc.strerror or exc}") from None


def check_speeds(spec: ClusterSpec, table: ThroughputTable) -> None:
    """ConfigError when a GPU type of `spec` has no measured speeds in `table`: no job could
    ever run on it, so the cluster could not be simulated as meant. A measured type of the same
    GPU generation (v100 for a V100 32 GB) is offered in its place."""
    missing = [t for t in spec.gpus_by_type if not table.isolated.get(t)]
    if missing:
        hints = [f"{t} -> {', '.join(alike)}" for t in missing
                 if (alike := _same_generation(t, table.gpu_types))]
        raise ConfigError(
            f"cluster GPU type(s) {', '.join(missing)}: no measured speeds, so no job could run "
            f"on them; the simulator's speed table (Gavel's measured throughputs) has "
            f"{', '.join(table.gpu_types)} only"
            + (f" (the same GPU generation, to use instead: {'; '.join(hints)})" if hints else "")
            + "; or pass --predicted-speeds to simulate them at speeds the predictor estimates")


def _same_generation(gpu_type: str, measured: Sequence[str]) -> list[str]:
    """The measured types of `gpu_type`'s GPU generation in the catalog (v100m32: v100)."""
    from slurm_hase.predict.catalog import resolve_gpu

    try:
        generation = resolve_gpu(gpu_type).generation
        return [t for t in measured if resolve_gpu(t).generation == generation]
    except HaseError:
        return []


def refused_jobs(jobs: Sequence[TraceJob], spec: ClusterSpec,
                 table: ThroughputTable) -> dict[str, list[TraceJob]]:
    """Jobs that can never start on `spec`, by reason ({} if none): the test SimCluster.add
    applies (simcluster.refusal), which cancels such a job at submission, as sbatch refuses
    it."""
    totals = spec.gpus_by_type
    order = tuple(totals)
    feature_types = feature_map(spec)
    memo: dict[tuple[str, int, int, tuple[str, ...], str | None], str | None] = {}
    out: dict[str, list[TraceJob]] = {}
    for tj in jobs:
        need = 1 if tj.gpu_fraction < 1.0 else tj.num_gpus
        key = (tj.workload, tj.num_gpus, need, tj.constraint, tj.pinned)
        if key not in memo:
            allowed = types_allowed("|".join(tj.constraint), tj.pinned, feature_types, order)
            memo[key] = refusal(allowed, table.runtimes(tj.workload, tj.num_gpus, 1.0, allowed),
                                totals, need)
        reason = memo[key]
        if reason is not None:
            out.setdefault(reason, []).append(tj)
    return out


def refusals(jobs: Sequence[TraceJob], spec: ClusterSpec, table: ThroughputTable) -> dict[str, int]:
    """refused_jobs(), counted by reason."""
    return {why: len(refused) for why, refused in refused_jobs(jobs, spec, table).items()}


def check_runnable(jobs: Sequence[TraceJob], spec: ClusterSpec,
                   table: ThroughputTable) -> dict[str, list[TraceJob]]:
    """refused_jobs(); ConfigError when no job of `jobs` can ever run on `spec`."""
    refused = refused_jobs(jobs, spec, table)
    if jobs and sum(len(r) for r in refused.values()) == len(jobs):
        cluster = ", ".join(f"{t}={n}" for t, n in spec.gpus_by_type.items())
        raise ConfigError(
            f"none of the {len(jobs)} jobs can run on this cluster (GPUs: {cluster}): "
            f"{describe_refusals(refused)}; the speed table has measured speeds for "
            f"{', '.join(t for t in table.gpu_types if t not in table.predicted)}"
            + (f" and predicted ones for {', '.join(table.predicted)}" if table.predicted
               else ""))
    return refused


def describe_refusals(refused: Mapping[str, Sequence[TraceJob]], examples: int = 0) -> str:
    """"3 need more GPUs than ...; 1 ask only for ..." (largest count first); with `examples`
    > 0, each reason names its first jobs' places in the trace file ("(line 12, line 40 and 1
    more)", or Alibaba pod names)."""
    parts = []
    for why, jobs in sorted(refused.items(), key=lambda kv: -len(kv[1])):
        text = f"{len(jobs)} {why}"
        if examples > 0:
            where = list(dict.fromkeys(j.source or f"job {j.job_id}" for j in jobs))
            text += f" ({name_some(where, examples)})"
        parts.append(text)
    return "; ".join(parts)


def refused_count(result: SimResult) -> int:
    """Jobs the simulated Slurm refused at submission (cancelled, never started)."""
    return sum(1 for j in result.jobs if j.state is JobState.CANCELLED and j.first_start < 0)


def run(trace: Sequence[TraceJob], spec: ClusterSpec, table: ThroughputTable, config: SimConfig,
        estimator: RuntimeEstimator | None = None) -> tuple[SimResult, dict[str, Any]]:
    """Simulate and compute metrics."""
    result = simulate(trace, spec, table, config, estimator)
    return result, compute(result)


def write_outputs(out: Path, name: str, result: SimResult, metrics: Mapping[str, Any],
                  meta: Mapping[str, Any]) -> list[Path]:
    """<name>.json (metrics + run settings), <name>_jobs.csv (with each job's place in the
    trace file, `trace_source`, last), <name>_timeline.csv."""
    out.mkdir(parents=True, exist_ok=True)
    summary = out / f"{name}.json"
    summary.write_text(json.dumps({"meta": dict(meta), "metrics": dict(metrics)}, indent=2,
                                  sort_keys=True) + "\n")
    jobs_csv = out / f"{name}_jobs.csv"
    rows = [{**row, "trace_source": j.trace.source}
            for row, j in zip(job_rows(result), result.jobs, strict=True)]
    with jobs_csv.open("w", newline="", encoding="utf-8") as fh:
        if rows:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    timeline = out / f"{name}_timeline.csv"
    types = list(result.gpus_by_type)
    with timeline.open("w", newline="") as fh:
        w2 = csv.writer(fh)
        w2.writerow(["t_s", "pending", "running", *[f"busy_{t}" for t in types]])
        for s in result.samples:
            w2.writerow([round(s.t, 3), s.pending, s.running, *[round(s.busy.get(t, 0.0), 3) for t in types]])
    return [summary, jobs_csv, timeline]


# What `hase simulate` writes into --out (besides POLICY.json, POLICY_jobs.csv and
# POLICY_timeline.csv for each policy): a later run into the same folder is told which of
# these are left from an earlier one.
MANIFEST = "run.json"
PLOT_NAMES = ("jct_cdf", "queue_length", "utilisation", "fairness")
# seeds.json first: the policy alternative would take it for a policy "seeds" and skip it
_OWN = re.compile(rf"seeds\.json|seed-\d+|({'|'.join(PLOT_NAMES)})\.(png|svg)|"
                  r"(?P<policy>[\w.-]+?)(\.json|_jobs\.csv|_timeline\.csv)")


def own_outputs(out: Path) -> list[Path]:
    """The files in `out` named as `hase simulate` names its results (policies' files, plots,
    seeds.json, and those in seed-K folders); not the manifest."""
    from slurm_hase.policy.registry import POLICIES

    found: list[Path] = []
    for path in sorted(out.iterdir()) if out.is_dir() else []:
        m = _OWN.fullmatch(path.name)
        if m is None or (m["policy"] is not None and m["policy"] not in POLICIES):
            continue
        if path.is_dir() and path.name.startswith("seed-"):
            found += [f for f in own_outputs(path) if f.parent == path]
        elif path.is_file():
            found.append(path)
    return found


def stale_outputs(out: Path, written: Sequence[Path]) -> list[str]:
    """own_outputs() that this run did not write, relative to `out`; a seed-K folder this run
    wrote nothing into is one entry ("seed-7/")."""
    mine = {p.resolve() for p in written}
    used = {p.parent for p in mine}
    stale: list[str] = []
    for path in own_outputs(out):
        if path.resolve() in mine:
            continue
        folder = path.parent
        entry = (folder.relative_to(out).as_posix() + "/"
                 if folder != out and folder.resolve() not in used
                 else path.relative_to(out).as_posix())
        if entry not in stale:
            stale.append(entry)
    return stale


def write_manifest(out: Path, written: Sequence[Path], settings: Mapping[str, Any]) -> Path:
    """OUT/run.json: this run's settings and the files it wrote (relative to `out`), so that
    files left in `out` by an earlier run are not taken for this run's."""
    files = [p.relative_to(out).as_posix() if p.is_relative_to(out) else str(p)
             for p in written]
    target = out / MANIFEST
    target.write_text(json.dumps({"files": files, "settings": dict(settings)}, indent=2,
                                 sort_keys=True) + "\n")
    return target


def record_run(out: Path, written: Sequence[Path], settings: Mapping[str, Any]) -> str | None:
    """Write OUT/run.json (write_manifest); the warning naming results in `out` from an earlier
    run (stale_outputs), or None."""
    target = write_manifest(out, written, settings)
    if not (stale := stale_outputs(out, written)):
        return None
    return (f"{out} also holds {len(stale)} result file(s) from an earlier run, not this one: "
            f"{name_some(stale)} (this run's files are listed in {target})")


class ProgressLines:
    """Plain progress lines for a stderr that is not a terminal (a log, a pipe, CI): the
    engine's progress callback (`update`), at most one line every `every_s` of wall time,
    e.g. "fair: 12,000/100,000 jobs finished, 95 s"; `finish` writes the last one."""

    def __init__(self, label: str, total: int, write: Callable[[str], None],
                 every_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.label, self.total, self.write, self.every_s, self.clock = (
            label, total, write, every_s, clock)
        self.done = 0
        self.start = self.last = clock()

    def update(self, finished: int) -> None:
        """`finished` more jobs finished; a line if `every_s` passed since the last one."""
        self.done += finished
        now = self.clock()
        if now - self.last >= self.every_s:
            self.last = now
            self.write(self._line(now))

    def finish(self) -> None:
        """The closing line (jobs finished of all, wall time)."""
        self.write(self._line(self.clock()))

    def _line(self, now: float) -> str:
        return (f"{self.label}: {self.done:,}/{self.total:,} jobs finished, "
                f"{now - self.start:.0f} s")
