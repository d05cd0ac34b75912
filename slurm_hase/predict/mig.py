"""MIG instances as GPU types. A site that splits its A100s or H100s with MIG names each instance
profile as a Slurm GRES type: ``a100_1g.5gb`` by hand, ``nvidia_a100-sxm4-40gb_1g.5gb`` with
``AutoDetect=nvml``; nvidia-smi says ``NVIDIA A100-SXM4-40GB MIG 1g.5gb``. Such a type is the
catalog entry of its GPU scaled to the instance, after NVIDIA's MIG User Guide ("Supported GPUs",
"Supported MIG Profiles"):

- compute (SMs and every TFLOPS figure): g of the GPU's compute slices, 7 on A100, H100 and
  H200, 4 on A30 (the guide's "fraction of SMs" is g/7, g/4). On A100 a 7g instance has 98 of
  the 108 SMs, so the figures overstate an A100 instance by up to 10%;
- memory: the size the profile names (``5gb``); bandwidth: the GPU's, times that size's share
  of the GPU's memory (a memory slice holds its share of the memory controllers: 1g.5gb is 1/8
  of an A100 40 GB's).

A job runs on one instance: CUDA uses a single MIG instance per process (the first it is
shown), and instances have no peer-to-peer path between them, so a job asking for several GPUs
is never sent to instances (`one_gpu_only`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace
from functools import lru_cache
from typing import TYPE_CHECKING

from slurm_hase.errors import UnknownGpuError

if TYPE_CHECKING:
    from slurm_hase.predict.catalog import GpuSpec

# <GPU>[_ -][MIG ]<g>g.<memory>gb[+me]: +me (media extensions) changes no compute or memory
PROFILE = re.compile(r"^(?P<gpu>.*?)[\s_\-]*(?:mig[\s_\-]*)?(?P<g>\d+)g\.(?P<mem>\d+)gb(?:\+me)?$")
# compute slices of each catalog GPU that has MIG (the guide's "Max Number of Instances")
SLICES: dict[str, int] = {
    "a30": 4, "a100": 7, "a100pcie": 7, "a100m80": 7, "a100pcie80": 7,
    "h100": 7, "h100pcie": 7, "h100nvl": 7, "h200": 7,
}
SOURCE = ("MIG instance: {gpu} scaled by NVIDIA's MIG User Guide (compute {g}/{slices} of the "
          "GPU, memory {mem} GB, bandwidth by its share of the GPU's memory)")


def is_mig_name(name: str) -> bool:
    """Whether a GPU type name has the form of a MIG instance profile (``..._1g.5gb``)."""
    return PROFILE.match(name.strip().lower()) is not None


@lru_cache(maxsize=256)
def mig_spec(name: str) -> GpuSpec:
    """The GpuSpec of a MIG instance type name; UnknownGpuError naming what is wrong (no GPU
    named, a GPU without MIG, more slices or memory than the GPU has)."""
    from slurm_hase.predict.catalog import catalog, resolve_gpu

    hit = PROFILE.match(name.strip().lower())
    if hit is None:
        raise UnknownGpuError(name, [])
    g, mem = int(hit["g"]), int(hit["mem"])
    if not hit["gpu"]:
        raise UnknownGpuError(name, [f"a100_{g}g.{mem}gb"], "a MIG instance type names its GPU")
    gpu = resolve_gpu(hit["gpu"])
    if mem > gpu.memory_gb:  # a100_1g.20gb: an instance of the 80 GB A100, not of the 40 GB
        bigger = [s for s in catalog().values() if s.key.startswith(gpu.key)
                  and s.sms == gpu.sms and s.memory_gb >= mem]
        if bigger:
            gpu = min(bigger, key=lambda s: s.memory_gb)
    slices = SLICES.get(gpu.key)
    if slices is None:
        raise UnknownGpuError(name, [], f"{gpu.name} has no MIG; MIG instances are known of "
                                        f"{', '.join(sorted(SLICES))}")
    if not 1 <= g <= slices or mem > gpu.memory_gb or mem <= 0:
        raise UnknownGpuError(name, [], f"{gpu.name} has {slices} compute slices and "
                                        f"{gpu.memory_gb:g} GB")
    share = g / slices
    return replace(
        gpu, key=f"{gpu.key}_{g}g.{mem}gb", name=f"{gpu.name} MIG {g}g.{mem}gb",
        memory_gb=float(mem), mem_bw_gbs=gpu.mem_bw_gbs * mem / gpu.memory_gb,
        sms=max(1, round(gpu.sms * share)), fp32_tflops=gpu.fp32_tflops * share,
        fp16_tflops=gpu.fp16_tflops * share, tensor_tflops=gpu.tensor_tflops * share,
        aliases=(), source=SOURCE.format(gpu=gpu.name, g=g, slices=slices, mem=mem),
    )


@lru_cache(maxsize=256)
def gpu_share(gpu_type: str) -> float:
    """The part of a physical GPU one GPU of `gpu_type` is: g / the GPU's compute slices for a
    MIG instance (``a100_1g.5gb``: 1/7), 1.0 for any other type, and for a name of MIG form
    that names no known GPU with MIG (nothing to scale it by)."""
    if not is_mig_name(gpu_type):
        return 1.0
    try:
        spec = mig_spec(gpu_type.strip().lower())
    except UnknownGpuError:
        return 1.0
    hit = PROFILE.match(spec.key)  # <GPU key>_<g>g.<memory>gb
    assert hit is not None
    return int(hit["g"]) / SLICES[hit["gpu"]]


def mig_parts(gpu_types: Iterable[str]) -> dict[str, float]:
    """The MIG instance types among `gpu_types` -> their part of a GPU ({} when none is)."""
    return {t: share for t in gpu_types if (share := gpu_share(t)) != 1.0}


def one_gpu_only(gpu_type: str) -> bool:
    """Whether a job on GPUs of `gpu_type` can use one of them only (a MIG instance type)."""
    return gpu_share(gpu_type) != 1.0
