"""Relative speed weights per GPU type, for normalised GPU-hours."""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from slurm_hase.errors import ConfigError, HaseError


def parse_weights(text: str) -> dict[str, float]:
    """"a100=1,v100=0.4" -> {"a100": 1.0, "v100": 0.4}; ConfigError names the bad item."""
    out: dict[str, float] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = item.partition("=")
        try:
            weight = float(value)
        except ValueError:
            weight = -1.0
        if not sep or not key.strip() or weight < 0:
            raise ConfigError(f"bad weight {item!r}: expected TYPE=NUMBER (>= 0), e.g. a100=1.0")
        out[key.strip()] = weight
    return out


def catalog_weights(gpu_types: Iterable[str]) -> dict[str, float]:
    """Peak FP16/tensor TFLOPS from slurm_hase.predict.catalog, relative to the fastest type.

    Types the catalog does not know (or no catalog at all) get 1.0.
    """
    try:
        catalog = importlib.import_module("slurm_hase.predict.catalog")
    except ImportError:
        return {t: 1.0 for t in gpu_types}
    peaks: dict[str, float] = {}
    unknown: list[str] = []
    for gpu_type in gpu_types:
        try:
            peaks[gpu_type] = float(catalog.resolve_gpu(gpu_type).peak_tflops("fp16"))
        except (HaseError, AttributeError, ValueError):
            unknown.append(gpu_type)
    top = max(peaks.values(), default=0.0)
    weights = {t: (p / top if top > 0 else 1.0) for t, p in peaks.items()}
    weights.update({t: 1.0 for t in unknown})
    return weights
