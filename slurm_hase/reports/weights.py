"""Relative speed weights per GPU type, for normalised GPU-hours."""

from __future__ import annotations

import importlib
import math
from collections.abc import Collection, Iterable, Mapping
from types import ModuleType

from slurm_hase.errors import ConfigError, HaseError, UnknownGpuError
from slurm_hase.reports.fairness import MPS_UNKNOWN, SHARD_UNKNOWN, UNTYPED


def parse_pairs(text: str, *, what: str = "weight", key: str = "TYPE",
                example: str = "a100=1.0") -> dict[str, float]:
    """"a100=1,v100=0.4" -> {"a100": 1.0, "v100": 0.4}: KEY=NUMBER items, numbers finite and
    >= 0; ConfigError names the bad item, the whole value and the expected form."""
    out: dict[str, float] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = item.partition("=")
        try:
            number = float(value)
        except ValueError:
            number = -1.0
        if not sep or not name.strip() or not (math.isfinite(number) and number >= 0):
            where = f" in {text!r}" if item != text.strip() else ""
            raise ConfigError(f"bad {what} {item!r}{where}: expected {key}=NUMBER (>= 0), "
                              f"e.g. {example}")
        out[name.strip()] = number
    return out


def parse_weights(text: str) -> dict[str, float]:
    """--weights "a100=1,v100=0.4" -> {"a100": 1.0, "v100": 0.4}."""
    return parse_pairs(text)


def _catalog() -> ModuleType | None:
    try:
        return importlib.import_module("slurm_hase.predict.catalog")
    except ImportError:
        return None


def _catalog_key(catalog: ModuleType, gpu_type: str) -> str | None:
    try:
        return str(catalog.resolve_gpu(gpu_type).key)
    except HaseError:
        return None


def check_weights(weights: Mapping[str, float], data_types: Collection[str]) -> dict[str, float]:
    """Weights keyed by the report's GPU types.

    A key that is a type in the data (or the report's own ``untyped`` / ``mps`` / ``shard``)
    stays; any
    other key must name a GPU of the catalog
    (ConfigError with its close matches otherwise) and then weighs the data's types that are the
    same catalog GPU (``A100=1`` for ``a100``) unless those have their own weight; a catalog
    GPU with no jobs in the report is accepted and has no effect.
    """
    own = {*data_types, UNTYPED, MPS_UNKNOWN, SHARD_UNKNOWN}
    out = {t: w for t, w in weights.items() if t in own}
    catalog = _catalog()
    for name, weight in weights.items():
        if name in own:
            continue
        seen = ", ".join(sorted(data_types)) or "none"
        if catalog is None:
            raise ConfigError(f"bad --weights: unknown GPU type {name!r} (GPU types in the report: {seen})")
        try:
            key = str(catalog.resolve_gpu(name).key)
        except UnknownGpuError as exc:
            raise ConfigError(f"bad --weights: {exc} (GPU types in the report: {seen})") from None
        for gpu_type in data_types:
            if gpu_type not in weights and _catalog_key(catalog, gpu_type) == key:
                out[gpu_type] = weight
    return out


def catalog_weights(gpu_types: Iterable[str]) -> dict[str, float]:
    """Peak FP16/tensor TFLOPS from slurm_hase.predict.catalog, relative to the fastest type.

    Types the catalog does not know (all, without a catalog) are left out: the report weighs
    them 1.0 and lists them as defaulted.
    """
    catalog = _catalog()
    if catalog is None:
        return {}
    peaks: dict[str, float] = {}
    for gpu_type in gpu_types:
        try:
            peaks[gpu_type] = float(catalog.resolve_gpu(gpu_type).peak_tflops("fp16"))
        except (HaseError, AttributeError, ValueError):
            continue
    top = max(peaks.values(), default=0.0)
    return {t: (p / top if top > 0 else 1.0) for t, p in peaks.items()}
