"""How good are the predicted speed ratios the simulator uses for GPU types Gavel never measured?

`hase simulate --predicted-speeds` (slurm_hase/sim/predicted.py) runs a job type on an unmeasured
type t at its measured v100 speed x pred(v100) / pred(t), the shipped model's P50 iteration times.
This benchmark compares that ratio (speed on t / speed on the v100) with measured ones:

1. out of sample: Sia's step times (../shared/data/sia/traces/<model>/placements-<cluster>.csv),
   single-node placements measured with the same placement and local batch on a cluster and on
   Sia's V100 cluster (azure); measured = step_time(V100) / step_time(t) (Sia's step_time already
   includes sync_time: Pollux's simulator takes step_time - sync_time as the compute part);
   predicted for WorkloadDescriptor(model, local batch, GPUs in the placement), clusters and
   models mapped as loaders.SIA_GPUS / SIA_MODELS map them;
2. in sample: Gavel's k80 and p100 against its v100 (the rows the model was trained on), for
   every (job type, scale factor) measured on both, with the simulator's own descriptors.

Per (model, GPU): points, median measured and predicted ratio, "off" = exp(median |log(pred /
measured)|) as a factor, "same side" = share of points where both say the type is faster (or
both slower) than the V100, "vs spec" = share of measured points contradicting the catalog (a
type with more FP32 and bandwidth than the V100 measured slower, or less of both measured faster).

Run: .venv/bin/python bench/sim_speeds.py from the repo root, with ../shared/data beside the
checkout. Writes bench/out/sim_speeds.md and .json. Deterministic (no sampling).
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from slurm_hase.predict.api import Predictor  # noqa: E402
from slurm_hase.predict.catalog import resolve_gpu  # noqa: E402
from slurm_hase.predict.descriptor import WorkloadDescriptor  # noqa: E402
from slurm_hase.predict.loaders import SIA_GPUS, SIA_MODELS, load_sia  # noqa: E402
from slurm_hase.predict.modelfile import load_predictor  # noqa: E402
from slurm_hase.sim.report import throughput_table  # noqa: E402
from slurm_hase.sim.throughput import REFERENCE_TYPE  # noqa: E402
from slurm_hase.sim.workloads import job_type_descriptor  # noqa: E402

SHARED = REPO.parent / "shared" / "data"
SIA = SHARED / "sia" / "traces"
OUT = REPO / "bench" / "out"
SIA_V100 = "azure"  # Sia's V100 cluster
GAVEL_TYPES = ("k80", "p100")  # measured beside the v100 in Gavel's table


@dataclass(frozen=True)
class Point:
    group: str  # Sia model or Gavel job family
    gpu: str  # "t4 (aws)", "k80"
    measured: float  # speed on gpu / speed on the V100
    predicted: float


@dataclass(frozen=True)
class Row:
    gpu: str
    group: str
    n: int
    measured: float
    predicted: float
    off: float
    same_side: float
    vs_spec: float | None


def predicted_ratio(pred: Predictor, desc: WorkloadDescriptor, gpu: str) -> float:
    """pred(v100) / pred(gpu), as predicted_table computes it."""
    p = pred.predict(desc, [REFERENCE_TYPE, gpu])
    return p[REFERENCE_TYPE].iter_time_p50 / p[gpu].iter_time_p50


def spec_side(gpu: str) -> int:
    """+1 / -1 when the type has more / less FP32 and bandwidth than the v100, else 0."""
    s, v = resolve_gpu(gpu), resolve_gpu(REFERENCE_TYPE)
    up = (s.fp32_tflops > v.fp32_tflops, s.mem_bw_gbs > v.mem_bw_gbs)
    return 1 if all(up) else -1 if not any(up) else 0


def summarize(gpu: str, group: str, pts: list[Point], side: int) -> Row:
    off = statistics.median(abs(math.log(p.predicted / p.measured)) for p in pts)
    same = sum((p.measured > 1) == (p.predicted > 1) for p in pts) / len(pts)
    wrong = None if side == 0 else sum((p.measured > 1) != (side > 0) for p in pts) / len(pts)
    return Row(gpu, group, len(pts), statistics.median(p.measured for p in pts),
               statistics.median(p.predicted for p in pts), math.exp(off), same, wrong)


def sia_points(pred: Predictor, notes: list[str]) -> list[Point]:
    """One point per single-node (model, GPUs, local batch) Sia measured both on its V100
    cluster and on another (loaders.load_sia: the step time, sync included, is the iteration)."""
    steps: dict[tuple[str, str], dict[tuple[int, int], float]] = defaultdict(dict)
    for row in load_sia(SIA):  # source "sia:<model>:<cluster>"
        _, sia_model, cluster = row.source.split(":")
        steps[(sia_model, cluster)][(row.desc.num_gpus, row.desc.batch_size or 0)] = row.iter_time_s
    pts: list[Point] = []
    m32: list[float] = []
    for sia_model, model in SIA_MODELS.items():
        ref = steps[(sia_model, SIA_V100)]
        for cluster, gpu in SIA_GPUS.items():
            if cluster == SIA_V100:
                continue
            own = steps[(sia_model, cluster)]
            for key in sorted(set(ref) & set(own)):
                desc = WorkloadDescriptor(model=model, batch_size=key[1], num_gpus=key[0])
                pts.append(Point(sia_model, f"{gpu} ({cluster})", ref[key] / own[key],
                                 predicted_ratio(pred, desc, gpu)))
                p = pred.predict(desc, [REFERENCE_TYPE, SIA_GPUS[SIA_V100]])
                m32.append(p[SIA_GPUS[SIA_V100]].iter_time_p50 / p[REFERENCE_TYPE].iter_time_p50)
    notes.append(f"Sia's V100 cluster ({SIA_V100}) is catalog {SIA_GPUS[SIA_V100]} "
                 f"({resolve_gpu(SIA_GPUS[SIA_V100]).name}); predictions use the simulator's "
                 f"reference {REFERENCE_TYPE} ({resolve_gpu(REFERENCE_TYPE).name}); the model "
                 f"predicts {SIA_GPUS[SIA_V100]} at {statistics.median(m32):.3f}x the "
                 f"{REFERENCE_TYPE}'s iteration time (median over these descriptors)")
    notes.append("t4 (aws): the T4 step times are in the shipped training data (Pollux); the "
                 "V100 and the other clusters' are not, so t4 lines are partly in sample")
    return pts


def gavel_points(pred: Predictor) -> list[Point]:
    """One point per (job type, GPUs) Gavel measured on the type and on its v100, described as
    the simulator describes it (the training rows' model and batch: sim/workloads.py)."""
    table = throughput_table(SHARED)
    ref = table.isolated[REFERENCE_TYPE]
    pts: list[Point] = []
    for gpu in GAVEL_TYPES:
        own = table.isolated.get(gpu, {})
        for job, sf in sorted(own):
            if own[(job, sf)] <= 0 or ref.get((job, sf), 0.0) <= 0:
                continue
            pts.append(Point(job.split(" (")[0], gpu, own[(job, sf)] / ref[(job, sf)],
                             predicted_ratio(pred, job_type_descriptor(job, sf), gpu)))
    return pts


def table(pts: list[Point], exclude: set[str], why: str) -> list[Row]:
    """A row per (GPU, group), then an "all" row per GPU (and one without `exclude`)."""
    by: dict[str, dict[str, list[Point]]] = defaultdict(lambda: defaultdict(list))
    for p in pts:
        by[p.gpu][p.group].append(p)
    rows: list[Row] = []
    for gpu in sorted(by):
        side = spec_side(gpu.split()[0])
        rows += [summarize(gpu, g, by[gpu][g], side) for g in sorted(by[gpu])]
        everything = [p for g in by[gpu].values() for p in g]
        rows.append(summarize(gpu, "all", everything, side))
        kept = [p for p in everything if p.group not in exclude]
        if exclude and kept and len(kept) < len(everything):
            rows.append(summarize(gpu, f"all {why}", kept, side))
    return rows


def render(title: str, rows: list[Row]) -> list[str]:
    out = [title, f"{'gpu':<20} {'model':<15} {'n':>4} {'measured':>9} {'predicted':>9} "
                  f"{'off':>6} {'same side':>9} {'vs spec':>7}"]
    for r in rows:
        spec = "-" if r.vs_spec is None else f"{r.vs_spec:.0%}"
        out.append(f"{r.gpu:<20} {r.group:<15} {r.n:>4} {r.measured:>9.2f} {r.predicted:>9.2f} "
                   f"{r.off:>5.2f}x {r.same_side:>9.0%} {spec:>7}")
    return out


def main() -> int:
    if not SIA.is_dir():
        print("skipped: needs ../shared/data/sia")
        return 0
    t0 = time.perf_counter()
    pred = load_predictor()
    notes: list[str] = []
    sia = sia_points(pred, notes)
    # A model whose V100 is measured slower than the T4 on most points is suspect (the V100 has
    # ~2x the T4's FP32 and ~3x its bandwidth): kept in its own lines, left out of "all excl.".
    t4 = defaultdict(list)
    for p in sia:
        if p.gpu.startswith("t4 "):
            t4[p.group].append(p.measured > 1)
    odd = {g for g, faster in t4.items() if sum(faster) > len(faster) / 2}
    for g in sorted(odd):
        notes.append(f"excluded from 'all excl.' lines: {g}, whose {SIA_V100} V100 is measured "
                     f"slower than the T4 on {sum(t4[g])}/{len(t4[g])} points")
    gavel = gavel_points(pred)
    sia_rows = table(sia, odd, "excl. " + ",".join(sorted(odd)))
    gavel_rows = table(gavel, set(), "")
    notes += [f"data: {r.gpu} {r.group} is measured against the catalog's order (more FP32 and "
              f"bandwidth = faster) on {r.vs_spec:.0%} of {r.n} points" for r in sia_rows + gavel_rows
              if not r.group.startswith("all") and r.vs_spec is not None and r.vs_spec > 0.5]
    lines = [*render("check 1 (out of sample): Sia step times, speed vs Sia's V100", sia_rows),
             "", *render("check 2 (in sample): Gavel's measured speed vs its v100", gavel_rows),
             "", *(f"- {n}" for n in notes)]
    print("\n".join(lines))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "sim_speeds.md").write_text(
        "# Predicted speed ratios vs measured (bench/sim_speeds.py)\n\n```\n"
        + "\n".join(lines) + "\n```\n")
    doc = {"sia": [asdict(r) for r in sia_rows], "gavel": [asdict(r) for r in gavel_rows],
           "notes": notes}
    (OUT / "sim_speeds.json").write_text(json.dumps(doc, indent=2) + "\n")
    print(f"\n{len(sia) + len(gavel)} points in {time.perf_counter() - t0:.1f} s; "
          f"wrote {OUT / 'sim_speeds.md'} and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
