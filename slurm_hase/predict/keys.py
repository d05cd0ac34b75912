"""What the training data knew about a query: model identity keys and knowledge levels."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from functools import lru_cache

from slurm_hase.predict.descriptor import WorkloadDescriptor

# What the training data knew about a (workload, GPU type) query, coarsest first. The P50 is scaled
# by a factor fitted per level (see ``train.calibrate``).
LEVELS: tuple[str, ...] = ("seen", "pair", "pair-few", "gpu", "model")
PAIR_FEW_GPUS = 4


def knowledge_level(
    known: Mapping[str, Sequence[str]], all_gpus: Collection[str], model_key: str, gpu_key: str
) -> str:
    """"model": the model was never measured; "gpu": the GPU type never was; "pair"/"pair-few":
    both were, not together (the model on at least / fewer than PAIR_FEW_GPUS GPU types);
    "seen": the model was measured on this GPU type (maybe at another batch size)."""
    gpus = known.get(model_key)
    if not gpus:
        return "model"
    if gpu_key not in all_gpus:
        return "gpu"
    if gpu_key not in gpus:
        return "pair" if len(gpus) >= PAIR_FEW_GPUS else "pair-few"
    return "seen"


def model_key(desc: WorkloadDescriptor) -> str:
    """The model identity used for calibration: the model table's name when the name resolves,
    the lower-cased name otherwise, or a GFLOPs tag for an anonymous workload (as
    ``Measurement.model``)."""
    if desc.model:
        return _named_key(desc.model)
    return f"gflops={desc.gflops_per_iter:.4g}" if desc.gflops_per_iter else "unknown"


@lru_cache(maxsize=4096)
def _named_key(name: str) -> str:
    from slurm_hase.predict.models import lookup_model

    info = lookup_model(name)
    return info.name if info is not None else name.strip().lower()
