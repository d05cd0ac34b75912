"""Cross-validation and scoring: MAPE overall and per group, ours beside the HASE baseline."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from slurm_hase.errors import DataError
from slurm_hase.predict.api import Predictor
from slurm_hase.predict.dataset import Measurement
from slurm_hase.predict.fitting import group_key
from slurm_hase.predict.keys import model_key

SPLITS: tuple[str, ...] = ("random", "leave-one-gpu-out", "leave-one-model-out", "leave-one-pair-out")


@dataclass
class Score:
    """MAPE (percent) overall, on co-located rows, and per GPU / per model."""

    n: int
    mape: float
    mape_colocated: float | None
    per_gpu: dict[str, float] = field(default_factory=dict)
    per_model: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {"n": self.n, "mape": self.mape, "mape_colocated": self.mape_colocated,
                "per_gpu": self.per_gpu, "per_model": self.per_model}


def mape(pred: Sequence[float], true: Sequence[float]) -> float:
    """Mean absolute percentage error, in percent."""
    if not true:
        return float("nan")
    return 100.0 * sum(abs(p - t) / t for p, t in zip(pred, true, strict=True)) / len(true)


def score(rows: Sequence[Measurement], pred: Sequence[float]) -> Score:
    """Score predictions aligned with rows (per model by ``model_key``: spellings as one)."""
    true = [m.iter_time_s for m in rows]
    by_gpu: dict[str, list[int]] = defaultdict(list)
    by_model: dict[str, list[int]] = defaultdict(list)
    co: list[int] = []
    for i, m in enumerate(rows):
        by_gpu[m.gpu].append(i)
        by_model[model_key(m.desc)].append(i)
        if m.desc.corunner_gflops:
            co.append(i)

    def sub(idx: list[int]) -> float:
        return round(mape([pred[i] for i in idx], [true[i] for i in idx]), 2)

    return Score(
        n=len(rows), mape=round(mape(list(pred), true), 2), mape_colocated=sub(co) if co else None,
        per_gpu={k: sub(v) for k, v in sorted(by_gpu.items())},
        per_model={k: sub(v) for k, v in sorted(by_model.items())},
    )


def predict_rows(pred: Predictor, rows: Sequence[Measurement]) -> list[float]:
    """Our model's P50 for each measured row (including the calibration factor and the physical
    floor, as ``Predictor.predict``: a GPU type without training data whose catalog figures equal
    a measured type's is looked up as that type, ``Predictor.twin``)."""
    import dataclasses

    import numpy as np

    from slurm_hase.predict.catalog import resolve_gpu
    from slurm_hase.predict.completion import context_key
    from slurm_hase.predict.fitting import matrix
    from slurm_hase.predict.pairs import query_shift

    floors = pred.floor_rows(rows)
    rows = [m if (look := pred.twin(resolve_gpu(m.gpu)).key) == m.gpu else dataclasses.replace(m, gpu=look)
            for m in rows]
    x, base, _y = matrix(rows, pred.compute_weight)
    keys = [model_key(m.desc) for m in rows]
    scale = np.asarray([pred.factor(k, m.gpu) for k, m in zip(keys, rows, strict=True)])
    unseen = np.asarray([pred.unseen(k) for k in keys], dtype=bool)
    s50 = pred.raw_scores(x, unseen)
    shift = [pred.cf_shift(pred.cf_row(m.desc, k), context_key(m.desc.corunner_gflops, m.desc.num_gpus), k, m.gpu,
                           float(s))
             + query_shift(pred.pairs, m.gpu, m.desc)
             for m, k, s in zip(rows, keys, s50, strict=True)]
    p50 = scale * np.exp(base + s50 + np.asarray(shift))
    return [float(v) for v in np.maximum(p50, np.asarray(floors))]


def folds(rows: Sequence[Measurement], split: str, k: int = 5, seed: int = 0) -> list[list[int]]:
    """Test-index lists for a split."""
    if split == "random":
        idx = list(range(len(rows)))
        random.Random(seed).shuffle(idx)
        return [idx[i::k] for i in range(k)]
    # models by model_key, as training knows them: `lstm` and `LSTM-LM` are one held-out model
    groups_of = {"leave-one-gpu-out": "gpu", "leave-one-model-out": "model",
                 "leave-one-pair-out": "pair"}
    if split not in groups_of:
        raise DataError(f"unknown split {split!r} (choose from {', '.join(SPLITS)})")
    key = group_key(groups_of[split])
    groups: dict[str, list[int]] = defaultdict(list)
    for i, m in enumerate(rows):
        groups[key(m)].append(i)
    if len(groups) < 2:
        raise DataError(f"split {split}: needs at least 2 groups, data has {len(groups)}")
    return list(groups.values())


def sample_folds(test_sets: list[list[int]], max_folds: int | None, seed: int = 0
                 ) -> list[list[int]]:
    """At most `max_folds` of `test_sets`, drawn with `seed` (all of them when None or fewer)."""
    if max_folds is not None and len(test_sets) > max_folds:
        return random.Random(seed).sample(test_sets, max_folds)
    return test_sets


def cross_validate(
    rows: Sequence[Measurement], split: str, *, baseline: bool = True, rounds: int | None = None,
    max_folds: int | None = None, seed: int = 0,
    on_fold: Callable[[int, int], None] | None = None,
) -> dict[str, Score]:
    """Out-of-fold predictions for ours (and the baseline) scored on the rows that were held out.

    ``on_fold(done, total)`` is called after each fold (progress)."""
    from slurm_hase.predict.baseline import HaseBaseline
    from slurm_hase.predict.train import NUM_ROUNDS, train

    test_sets = sample_folds(folds(rows, split, seed=seed), max_folds, seed)
    ours: dict[int, float] = {}
    base: dict[int, float] = {}
    for done, test in enumerate(test_sets, 1):
        held = set(test)
        tr = [m for i, m in enumerate(rows) if i not in held]
        te = [rows[i] for i in test]
        try:
            model = train(tr, rounds=rounds or NUM_ROUNDS, with_p90=False)
        except DataError as exc:
            raise DataError(f"split {split}, fold {done} of {len(test_sets)} ({len(te)} rows held "
                            f"out, {len(tr)} left to train on): {exc}") from exc
        for i, p in zip(test, predict_rows(model, te), strict=True):
            ours[i] = p
        if baseline:
            bl = HaseBaseline().fit(tr)
            for i, p in zip(test, bl.predict(te), strict=True):
                base[i] = float(p)
        if on_fold is not None:
            on_fold(done, len(test_sets))
    order = sorted(ours)
    sel = [rows[i] for i in order]
    out = {"ours": score(sel, [ours[i] for i in order])}
    if baseline:
        out["hase_baseline"] = score(sel, [base[i] for i in order])
    return out
