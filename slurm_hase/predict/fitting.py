"""What the predictor's trainers share: the feature matrix, source weights, the LightGBM fit,
knowledge levels and grouped folds (train.py, blend.py)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from slurm_hase.predict import features as F
from slurm_hase.predict.catalog import resolve_gpu
from slurm_hase.predict.dataset import Measurement
from slurm_hase.predict.keys import knowledge_level, model_key

GBM_PARAMS: dict[str, Any] = {
    "learning_rate": 0.2, "num_leaves": 31, "min_data_in_leaf": 3, "feature_fraction": 0.9,
    "bagging_fraction": 0.9, "bagging_freq": 1, "lambda_l2": 1.0, "verbose": -1,
    "num_threads": 1, "deterministic": True, "force_row_wise": True, "seed": 7,
    "monotone_constraints_method": "advanced",
}
# Physics the trees must respect (on the learned log-efficiency): more weight traffic never
# speeds a job up. (Constraining the co-runner features too doubled the random-split error:
# measured co-located pairs are not always slower.) Memory bandwidth is not constrained since the
# base carries it (session 22): with the base at bandwidth^-(1 - COMPUTE_WEIGHT), a non-increasing
# residual forced every job to speed up at least as fast as bandwidth^-0.5, which Gavel's
# Recommendation (as fast on a K80 as on a V100) contradicts; dropping it took leave-one-pair-out
# MAPE from 74.4% to 47.9% (all 121 pairs: 49.0% to 43.6%) at equal random and GPU-out error
# (docs/predictor.md). Before the bandwidth base, the constraint took GPU-out from 64% to 46%.
MONOTONE: dict[str, int] = {"log_weight_time": 1}


def matrix(rows: Sequence[Measurement], compute_weight: float = F.COMPUTE_WEIGHT) -> tuple[Any, Any, Any]:
    """(X, base, y) where the model learns ``log(iter_time) - base`` (features.base_of)."""
    import numpy as np

    xs: list[list[float]] = []
    bases: list[float] = []
    for m in rows:
        x, b = F.row(m.desc, resolve_gpu(m.gpu), compute_weight)
        xs.append(x)
        bases.append(b)
    x_arr = np.asarray(xs, dtype=float).reshape(len(rows), len(F.FEATURES))
    base = np.asarray(bases)
    y = np.log(np.asarray([m.iter_time_s for m in rows])) - base
    return x_arr, base, y


def weights(rows: Sequence[Measurement]) -> Any:
    """Balance data sources: each source family weighs about the same in total (sqrt-damped)."""
    import numpy as np

    fam = [m.source.split(":")[0] if m.source else "site" for m in rows]
    counts = Counter(fam)
    return np.asarray([1.0 / math.sqrt(counts[f]) for f in fam]) * math.sqrt(len(rows))


def fit_trees(
    x: Any, y: Any, w: Any, objective: str, rounds: int, alpha: float = 0.5, extra: dict[str, Any] | None = None,
    monotone: dict[str, int] | None = None,
) -> str:
    """A LightGBM model (as text) of y on x with weights w: GBM_PARAMS, MONOTONE unless
    `monotone` or a quantile objective."""
    import lightgbm as lgb

    params = dict(GBM_PARAMS, objective=objective, **(extra or {}))
    if objective == "quantile":
        params["alpha"] = alpha
    else:
        params["monotone_constraints"] = [(monotone or MONOTONE).get(f, 0) for f in F.FEATURES]
    booster = lgb.train(params, lgb.Dataset(x, y, weight=w, free_raw_data=True), num_boost_round=rounds)
    return str(booster.model_to_string())


def known_gpus(rows: Sequence[Measurement]) -> dict[str, list[str]]:
    """Model key -> sorted GPU types it was measured on."""
    out: dict[str, set[str]] = {}
    for m in rows:
        out.setdefault(model_key(m.desc), set()).add(m.gpu)
    return {k: sorted(v) for k, v in sorted(out.items())}


def levels(train_rows: Sequence[Measurement], test_rows: Sequence[Measurement]) -> list[str]:
    """Knowledge level of each test row relative to the training rows (same rule as
    ``Predictor.level``)."""
    known = known_gpus(train_rows)
    all_gpus = {m.gpu for m in train_rows}
    return [knowledge_level(known, all_gpus, model_key(m.desc), m.gpu) for m in test_rows]


def group_folds(rows: Sequence[Measurement], split: str, k: int, seed: int = 1) -> list[list[int]]:
    """k folds of row indices, each holding out whole groups of `split` (random: rows)."""
    import random

    if split == "random":
        idx = list(range(len(rows)))
        random.Random(seed).shuffle(idx)
        return [idx[j::k] for j in range(k)]
    key = group_key(split)
    groups: dict[str, list[int]] = {}
    for i, m in enumerate(rows):
        groups.setdefault(key(m), []).append(i)
    names = sorted(groups)
    random.Random(seed).shuffle(names)
    return [[i for n in names[j::k] for i in groups[n]] for j in range(k) if names[j::k]]


def group_key(split: str) -> Callable[[Measurement], str]:
    """What a calibration fold holds out together (every held-out group weighs the same)."""
    if split == "random":
        return lambda m: "row"
    if split == "pair":
        return lambda m: f"{model_key(m.desc)}@{m.gpu}"
    if split == "gpu":
        return lambda m: m.gpu
    return lambda m: model_key(m.desc)
