"""Checks of a model file's parts before a Predictor is built of them (clear errors, no guesses)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from slurm_hase.errors import PredictorError
from slurm_hase.predict import bound
from slurm_hase.predict.keys import LEVELS

# "p50_unseen": a strongly regularised P50 used for models absent from the training data (optional).
BOOSTERS: tuple[str, ...] = ("p50", "p90", "p50_unseen")


def check_fields(boosters: Mapping[str, str], factors: Mapping[str, float], meta: Mapping[str, Any],
                 floor_scales: dict[str, float] | None) -> tuple[float, dict[str, float] | None]:
    """(the roofline's compute weight, the floor scales checked) of a model file's parts; raises
    PredictorError naming the part that is wrong."""
    for q in ("p50", "p90"):
        if q not in boosters:
            raise PredictorError(f"model file: missing the {q} booster")
    unknown = set(boosters) - set(BOOSTERS)
    if unknown:
        raise PredictorError(f"model file: unknown booster(s) {', '.join(sorted(unknown))}")
    for lv, f in factors.items():
        if lv not in LEVELS or not (isinstance(f, (int, float)) and math.isfinite(f) and 0.0 < f <= 10.0):
            raise PredictorError(f"model file: bad calibration factor {lv}={f!r}")
    weight = meta.get("compute_weight", 1.0)  # files without it: the compute roofline
    if not (isinstance(weight, (int, float)) and not isinstance(weight, bool)
            and math.isfinite(weight) and 0.0 <= weight <= 1.0):
        raise PredictorError(f"model file: bad compute_weight {weight!r} (a number in [0, 1])")
    if floor_scales is not None:
        try:
            floor_scales = bound.check_scales(floor_scales)
        except ValueError as exc:
            raise PredictorError(f"model file: {exc}") from None
    return float(weight), floor_scales
