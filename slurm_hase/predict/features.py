"""Feature rows for (workload, GPU type) pairs, shared by training and prediction.

The learned target is ``log(iter_time) - base`` where ``base`` is the log of a roofline time: the
geometric mean of the compute-roofline time (GFLOPs / peak TFLOPS at the job's precision) and a
bandwidth-roofline time (GFLOPs / (memory bandwidth x FLOP_PER_BYTE)), weighted by the model's
``compute_weight`` (COMPUTE_WEIGHT for new models; 1, the compute roofline alone, for model files
that do not say). Trees learn an efficiency that carries over to GPU types absent from the
training data; the blend is there because measured training speeds scale with memory bandwidth
as much as with peak FLOPS (docs/predictor.md, round 6).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from slurm_hase.predict.catalog import GpuSpec
from slurm_hase.predict.descriptor import WorkloadDescriptor
from slurm_hase.predict.models import fill

if TYPE_CHECKING:
    import numpy as np

FEATURES: tuple[str, ...] = (
    "log_gflops", "log_params", "log_batch", "log_gflops_per_sample", "precision", "is_train",
    "log2_gpus", "n_corunners", "log1p_corunner_gflops", "log_load_ratio",
    "log_peak_tflops", "log_mem_bw", "log_sms", "generation", "log_mem_gb", "log_fp32_tflops",
    "log_compute_time", "log_weight_time",
)
N_JOB = 10
N_GPU = 6
PRECISION_CODE = {"fp32": 0.0, "tf32": 1.0, "fp16": 2.0, "bf16": 2.0, "int8": 3.0}
BYTES_PER_PARAM = {"fp32": 4.0, "tf32": 4.0, "fp16": 2.0, "bf16": 2.0, "int8": 1.0}
_LOG_1E3 = math.log(1e3)
_Num = TypeVar("_Num", float, "np.ndarray[Any, Any]")
# Weight of the compute roofline in the base (the rest: the bandwidth roofline). 1 = compute only,
# what model files without a "compute_weight" were trained with.
COMPUTE_WEIGHT = 0.5
# Arithmetic intensity that turns GB/s into TFLOPS for the bandwidth roofline. Only the base's
# dependence on the GPU matters (a constant shifts every target alike), so this only sets its units.
FLOP_PER_BYTE = 10.0
_LOG_TFLOPS_PER_GBS = math.log(FLOP_PER_BYTE * 1e9 / 1e12)


def job_vector(desc: WorkloadDescriptor) -> list[float]:
    """The job part of a row (raises DescriptorError when GFLOPs cannot be known)."""
    f = fill(desc)
    co = sum(desc.corunner_gflops)
    lg = math.log(f.gflops)
    return [
        lg,
        math.log(f.params_m),
        math.log(f.batch_size),
        lg - math.log(f.batch_size),
        PRECISION_CODE[desc.precision],
        1.0 if desc.mode == "train" else 0.0,
        math.log2(desc.num_gpus),
        float(len(desc.corunner_gflops)),
        math.log1p(co),
        math.log((f.gflops + co) / f.gflops),
    ]


def gpu_vector(spec: GpuSpec, precision: str) -> list[float]:
    """The GPU part of a row (depends on the job's precision through the usable peak)."""
    return [
        math.log(spec.peak_tflops(precision)),
        math.log(spec.mem_bw_gbs),
        math.log(spec.sms),
        float(spec.generation_index),
        math.log(spec.memory_gb),
        math.log(spec.fp32_tflops),
    ]


def cross(job: Sequence[float], gpu: Sequence[float], precision: str) -> tuple[float, float]:
    """(log compute-roofline seconds, log seconds to read the weights once)."""
    compute = job[0] - gpu[0] - _LOG_1E3
    weights = job[1] + math.log(1e6 * BYTES_PER_PARAM[precision]) - gpu[1] - math.log(1e9)
    return compute, weights


def base_of(compute: _Num, log_peak: _Num, log_bw: _Num, compute_weight: float) -> _Num:
    """The base (log roofline seconds) from the log compute-roofline time, the GPU's log peak
    TFLOPS and log bandwidth (floats, or numpy arrays of them): compute_weight x compute roofline
    + (1 - compute_weight) x bandwidth roofline, in logs."""
    if compute_weight == 1.0:
        return compute
    base: _Num = compute + (1.0 - compute_weight) * (log_peak - log_bw - _LOG_TFLOPS_PER_GBS)
    return base


def row(desc: WorkloadDescriptor, spec: GpuSpec, compute_weight: float = COMPUTE_WEIGHT
        ) -> tuple[list[float], float]:
    """(feature row, base) for one pair; the prediction is ``exp(base + model(row))``."""
    job = job_vector(desc)
    gpu = gpu_vector(spec, desc.precision)
    c, w = cross(job, gpu, desc.precision)
    return [*job, *gpu, c, w], base_of(c, gpu[0], gpu[1], compute_weight)


def feature_matrix(
    descs: Sequence[WorkloadDescriptor], specs: Sequence[GpuSpec], compute_weight: float = COMPUTE_WEIGHT
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Rows for every (desc, gpu) pair, desc-major; and the base (log roofline seconds)."""
    return matrix_of([(tuple(job_vector(d)), d.precision) for d in descs], specs, compute_weight)


def matrix_of(
    jobs_prec: Sequence[tuple[tuple[float, ...], str]], specs: Sequence[GpuSpec],
    compute_weight: float = COMPUTE_WEIGHT,
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """feature_matrix from (job vector, precision) pairs (numpy is imported here, on first use)."""
    import numpy as np

    n, k = len(jobs_prec), len(specs)
    jobs = np.array([j for j, _p in jobs_prec], dtype=float).reshape(n, N_JOB)
    precs = [p for _j, p in jobs_prec]
    gpus = np.zeros((n, k, N_GPU))
    for p in set(precs):
        tab = np.array([gpu_vector(s, p) for s in specs], dtype=float).reshape(k, N_GPU)
        idx = np.array([i for i, q in enumerate(precs) if q == p], dtype=np.int64)
        gpus[idx] = tab[None, :, :]
    jb = np.broadcast_to(jobs[:, None, :], (n, k, N_JOB))
    compute = jb[:, :, 0] - gpus[:, :, 0] - math.log(1e3)
    bpp = np.array([BYTES_PER_PARAM[p] for p in precs])[:, None]
    weights = jb[:, :, 1] + np.log(1e6 * bpp) - gpus[:, :, 1] - math.log(1e9)
    x = np.concatenate([jb, gpus, compute[:, :, None], weights[:, :, None]], axis=2)
    base = base_of(compute, gpus[:, :, 0], gpus[:, :, 1], compute_weight)
    return x.reshape(n * k, len(FEATURES)), base.reshape(n * k)
