"""Turn public measurement sets (../shared/data) into canonical Measurements.

- Gavel ``simulation_throughputs.json`` (MIT): steps/s per (job type, GPU count) on K80/P100/V100,
  and per co-located pair (space sharing, the MPS case).
- MLPerf inference flat CSV (Apache-2.0): Offline samples/s per accelerator, closed division.
- Sia/Pollux ``placements-<cluster>.csv``: step times per (model, local batch, placement).
  Only the ``aws`` (T4) files are Apache-2.0 (Pollux); the rest may be used from ../shared only.
"""

from __future__ import annotations

import ast
import csv
import json
import re
import statistics
from collections import defaultdict
from pathlib import Path

from slurm_hase.errors import DataError, PredictorError
from slurm_hase.predict.catalog import resolve_gpu
from slurm_hase.predict.dataset import Measurement, make
from slurm_hase.predict.models import MODELS

# Gavel job type -> (model-table name, default batch when the type has none)
GAVEL_MODELS: dict[str, tuple[str, int]] = {
    "ResNet-18": ("resnet18-cifar", 128),
    "ResNet-50": ("resnet50", 64),
    "Transformer": ("transformer-multi30k", 64),
    "LM": ("lstm-lm", 20),
    "Recommendation": ("recommendation", 1024),
    "A3C": ("a3c", 4),
    "CycleGAN": ("cyclegan", 1),
}
# MLPerf model -> (model-table name, precision the NVIDIA submissions run)
MLPERF_MODELS: dict[str, tuple[str, str]] = {
    "resnet50": ("resnet50", "int8"),
    "retinanet": ("retinanet", "int8"),
    "bert-99": ("bert-large", "int8"),
    "bert-99.9": ("bert-large", "fp16"),
    "rnnt": ("rnnt", "fp16"),
    "3d-unet-99": ("3d-unet", "int8"),
    "3d-unet-99.9": ("3d-unet", "fp16"),
    "gptj-99": ("gpt-j", "fp16"),
    "gptj-99.9": ("gpt-j", "fp16"),
    "stable-diffusion-xl": ("stable-diffusion-xl", "fp16"),
}
# Sia cluster key -> GPU type; Sia model dir -> (model-table name)
SIA_GPUS: dict[str, str] = {"aws": "t4", "azure": "v100m32", "dgx": "a100", "dgx-ext": "a100",
                            "quad": "rtx6000", "rtx": "rtx2080ti"}
SIA_MODELS: dict[str, str] = {"imagenet": "resnet50", "cifar10": "resnet18-cifar", "bert": "bert-base",
                              "deepspeech2": "deepspeech2", "ncf": "ncf", "yolov3": "yolov3"}
_JOB_RE = re.compile(r"^(?P<name>[A-Za-z0-9\-]+)(?: \(batch size (?P<bs>\d+)\))?$")


def _gavel_job(text: str) -> tuple[str, int, int]:
    """('ResNet-50 (batch size 64)', 1) -> (table model, batch size, scale factor)."""
    name, scale = ast.literal_eval(text)
    m = _JOB_RE.match(name)
    if m is None or m.group("name") not in GAVEL_MODELS:
        raise DataError(f"gavel: unknown job type {name!r}")
    model, default_bs = GAVEL_MODELS[m.group("name")]
    return model, int(m.group("bs") or default_bs), int(scale)


def load_gavel(path: str | Path, colocated: bool = True) -> list[Measurement]:
    """Isolated rows for every (job, scale) and co-located rows for scale-1 pairs.

    Gavel counts a distributed job's steps over all its workers (8 workers each doing a step
    of the local batch = 8 steps: ResNet-50 at batch 64 on 8 V100s reads 17.3 steps/s, which
    as whole-job steps of 8 x 64 images would be ~1,100 images/s per V100, 4x its peak). A row's
    iteration is one step on every GPU (the descriptor's local batch, as in Sia's step times),
    so its time is scale / throughput."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: cannot read Gavel throughputs ({exc})") from None
    out: list[Measurement] = []
    src = "gavel:" + Path(path).name
    for gpu, jobs in doc.items():
        if "unconsolidated" in gpu:
            continue
        for job_text, entries in jobs.items():
            model, bs, scale = _gavel_job(job_text)
            gfl = MODELS[model].gflops_per_sample * bs * 3.0
            iso = entries.get("null")
            if iso:
                out.append(make(gpu, model, gfl, None, bs, "fp32", "train", scale, (), scale / iso, src))
            if not colocated or scale != 1:
                continue
            for other_text, pair in entries.items():
                if other_text == "null" or not pair or pair[0] <= 0:
                    continue
                om, obs, oscale = _gavel_job(other_text)
                if oscale != 1:
                    continue
                ogfl = MODELS[om].gflops_per_sample * obs * 3.0
                out.append(make(gpu, model, gfl, None, bs, "fp32", "train", 1, (ogfl,), 1.0 / pair[0], src))
    return out


def load_mlperf(path: str | Path) -> list[Measurement]:
    """Per-GPU Offline throughput per (GPU, model): the upper quartile over all submissions.

    Cleaning (real-data quirks): GPT-J from v4.1 on reports tokens/s under "Samples/s", so only
    earlier rounds are used; llama2-70b (tokens/s) is left out; untuned community runs (10-40x
    slower than tuned ones on the same card) are outvoted by taking the upper quartile."""
    groups: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    try:
        with Path(path).open(newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise DataError(f"{path}: cannot read MLPerf results ({exc})") from None
    for r in rows:
        if (r.get("Division") != "closed" or r.get("Scenario") != "Offline"
                or r.get("Result_Units") != "Samples/s" or r.get("Model") not in MLPERF_MODELS):
            continue
        acc = r.get("accelerator_model_name", "")
        if "mig" in acc.lower() or not acc.upper().startswith(("NVIDIA", "TESLA")):
            continue
        try:
            gpu = resolve_gpu(acc).key
            n = int(r["accelerators_per_node"]) * int(r["number_of_nodes"] or 1)
            tput = float(r["Result"])
        except (PredictorError, ValueError):
            continue
        if n < 1 or tput <= 0:
            continue
        if r["Model"].startswith("gptj") and _version(r["version"]) >= (4, 1):
            continue
        groups[(gpu, r["Model"])][r["version"]].append(tput / n)
    out: list[Measurement] = []
    for (gpu, mlmodel), by_version in sorted(groups.items()):
        newest = max(by_version, key=_version)
        values = sorted(t for ts in by_version.values() for t in ts)
        per_gpu = statistics.quantiles(values, n=4)[2] if len(values) > 1 else values[0]
        model, prec = MLPERF_MODELS[mlmodel]
        info = MODELS[model]
        out.append(make(gpu, model, info.gflops_per_sample, None, 1, prec, "infer", 1, (), 1.0 / per_gpu,
                        f"mlperf:{mlmodel}:{newest}"))
    return out


def _version(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v))


def load_sia(
    traces_dir: str | Path, clusters: tuple[str, ...] = tuple(SIA_GPUS), single_node: bool = True
) -> list[Measurement]:
    """Iteration time per (model, local batch, placement); single-node placements by default
    (the descriptor has no node count). Sia's (and Pollux's) `step_time` is the whole
    iteration, its gradient sync included: their simulators take `step_time - sync_time` as
    the time of an accumulation step without sync, so `sync_time` is not added again."""
    root = Path(traces_dir)
    out: list[Measurement] = []
    for model_dir, model in SIA_MODELS.items():
        for cluster in clusters:
            f = root / model_dir / f"placements-{cluster}.csv"
            if not f.is_file():
                continue
            with f.open(newline="") as fh:
                for r in csv.DictReader(fh):
                    placement = r["placement"].strip()
                    if single_node and len(placement) != 1:
                        continue
                    gpus = sum(int(c) for c in placement)
                    bs = int(r["local_bsz"])
                    t = float(r["step_time"])
                    if t <= 0 or gpus < 1:
                        continue
                    gfl = MODELS[model].gflops_per_sample * bs * 3.0
                    out.append(make(SIA_GPUS[cluster], model, gfl, None, bs, "fp32", "train", gpus, (), t,
                                    f"sia:{model_dir}:{cluster}"))
    return out


def shipped_rows(shared: str | Path) -> list[Measurement]:
    """The redistributable training set: Gavel (MIT), MLPerf (Apache), Pollux T4 (Apache)."""
    s = Path(shared)
    return [
        *load_gavel(s / "gavel" / "simulation_throughputs.json"),
        *load_mlperf(s / "mlperf" / "mlperf_inference_results_flat.csv"),
        *load_sia(s / "sia" / "traces", clusters=("aws",)),
    ]
