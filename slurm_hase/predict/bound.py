"""The physical floor of an iteration's time: no prediction is faster than the GPU could possibly
run the work the descriptor declares (docs/predictor.md, "The physical floor").

An iteration does the descriptor's GFLOPs per GPU (``models.fill``: per-sample forward GFLOPs x
local batch, x 3 for training) and, at least, reads the weights once (parameters x bytes per
parameter at the job's precision, split over its GPUs at best: a tensor- or pipeline-parallel job
holds only its share). So, from the catalog's own figures,

    floor = scale x max(GFLOPs / peak TFLOPS at the precision, weight bytes / memory bandwidth)

The peak is ``GpuSpec.peak_tflops`` (FP32; TF32 and bf16 tensor cores where the GPU has them,
FP32 where not; FP16 tensor cores) except for int8, where the catalog's figure is the FP16
tensor rate: dense INT8 tensor cores run at twice it (Turing and later) and DP4A at 4x FP32
(Pascal 6.1 and later), so the larger of those bounds it.

``scale`` is 1 for a workload the training data never measured (its descriptor is all there is
to go on). The model table's FLOPs are approximate public figures, and measured rows beat the
plain floor by up to 4x (Gavel's Recommendation and LSTM: the table's FLOPs are too high;
MLPerf BERT-Large: packed sequences do less work than 384 tokens; MLPerf's per-sample times
amortise the weights over a batch larger than the batch of 1 the rows record). A (model, mode)
the training data measured therefore gets the lowest measured / floor ratio of its rows
(``scales``, at most 1, at least MIN_SCALE), so the floor never sits above a measurement the
model was trained on: the measurements prove that much less work was done than the table says.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from slurm_hase.predict.catalog import GpuSpec
from slurm_hase.predict.features import BYTES_PER_PARAM

if TYPE_CHECKING:
    import numpy as np

    from slurm_hase.predict.dataset import Measurement

INT8_PER_FP16_TENSOR = 2.0  # dense INT8 tensor-core rate over the dense FP16 one (Turing and later)
DP4A_PER_FP32 = 4.0  # INT8 dot products (DP4A) over the FP32 rate (Pascal 6.1 and later)
# A (model, mode) whose measurements beat the floor by more than 10x has broken figures or rows;
# its floor still holds at a tenth.
MIN_SCALE = 0.1


def bound_tflops(spec: GpuSpec, precision: str) -> float:
    """The fastest dense rate (TFLOPS) this GPU type could run a job of this precision at."""
    if precision == "int8":
        return max(INT8_PER_FP16_TENSOR * spec.tensor_tflops, DP4A_PER_FP32 * spec.fp32_tflops,
                   spec.peak_tflops("int8"))
    return spec.peak_tflops(precision)


def floor_key(model_key: str, mode: str) -> str:
    """The key of a (model, mode) in ``scales``."""
    return f"{model_key}|{mode}"


def floor_seconds(job: Sequence[float], precision: str, spec: GpuSpec) -> float:
    """The unscaled floor (seconds) of one iteration; ``job`` is ``features.job_vector``'s row
    (log GFLOPs, log params, ..., log2 GPUs at index 6)."""
    compute = math.exp(job[0]) / (bound_tflops(spec, precision) * 1e3)
    weights = (math.exp(job[1]) * 1e6 * BYTES_PER_PARAM[precision] / math.pow(2.0, job[6])
               / (spec.mem_bw_gbs * 1e9))
    return max(compute, weights)


def floor_matrix(
    jobs: np.ndarray[Any, Any], precisions: Sequence[str], specs: Sequence[GpuSpec]
) -> np.ndarray[Any, Any]:
    """``floor_seconds`` for every (job row, GPU type): an [n, k] array."""
    import numpy as np

    n, k = len(precisions), len(specs)
    out = np.zeros((n, k))
    bw = np.asarray([s.mem_bw_gbs for s in specs], dtype=float) * 1e9
    for p in set(precisions):
        idx = np.asarray([i for i, q in enumerate(precisions) if q == p], dtype=np.int64)
        peak = np.asarray([bound_tflops(s, p) for s in specs], dtype=float) * 1e3
        j = jobs[idx]
        compute = np.exp(j[:, 0])[:, None] / peak[None, :]
        weights = (np.exp(j[:, 1]) * 1e6 * BYTES_PER_PARAM[p] / np.exp2(j[:, 6]))[:, None] / bw[None, :]
        out[idx] = np.maximum(compute, weights)
    return out


def scales(rows: Iterable[Measurement]) -> dict[str, float]:
    """Per (model key, mode) of the training rows: the lowest measured time / floor, clipped to
    [MIN_SCALE, 1] and rounded down to 4 digits (``floor_key`` -> scale)."""
    from slurm_hase.predict.catalog import resolve_gpu
    from slurm_hase.predict.features import job_vector
    from slurm_hase.predict.keys import model_key

    low: dict[str, float] = {}
    for m in rows:
        ratio = m.iter_time_s / floor_seconds(job_vector(m.desc), m.desc.precision, resolve_gpu(m.gpu))
        key = floor_key(model_key(m.desc), m.desc.mode)
        low[key] = min(low.get(key, 1.0), ratio)
    return {k: max(MIN_SCALE, math.floor(v * 1e4) / 1e4) for k, v in sorted(low.items())}


def check_scales(value: object) -> dict[str, float]:
    """A model file's ``floor`` scales, validated (ValueError otherwise)."""
    if not isinstance(value, Mapping):
        raise ValueError("floor: expected an object of scales")
    out: dict[str, float] = {}
    for k, v in value.items():
        if not (isinstance(k, str) and "|" in k and isinstance(v, int | float) and not isinstance(v, bool)
                and math.isfinite(v) and MIN_SCALE <= v <= 1.0):
            raise ValueError(f"floor: bad scale {k!r}: {v!r} (a number in [{MIN_SCALE}, 1])")
        out[k] = float(v)
    return out
