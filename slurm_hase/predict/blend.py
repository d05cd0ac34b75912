"""The collaborative-filtering completions and their blend with the P50 trees, chosen on inner
folds of the training rows (completion.py holds the factorisation itself)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from slurm_hase.predict import completion as CF
from slurm_hase.predict.dataset import Measurement
from slurm_hase.predict.fitting import fit_trees, group_folds, levels, weights
from slurm_hase.predict.keys import model_key

# Collaborative filtering (``complete``): candidate ranks and ridge of the workload x (GPU type,
# co-runners) factorisation; the rank and the blend weight per knowledge level are chosen on inner
# folds of the training rows only (rows held out at random for "seen", by (model, GPU) pairs for
# "pair"), from BLEND_GRID.
# Rank 1 is not a candidate: it extrapolated worst to held-out (model, GPU) pairs (all 121 pairs,
# blend weight 0.5, clipped at 2x: 59% vs 43% at rank 2 and 47% at rank 3; the trees: 57%), yet
# inner folds sometimes chose it.
CF_RANKS: tuple[int, ...] = (2, 3)
CF_RIDGE = 0.3
CF_FOLDS = 4
BLEND_GRID: tuple[float, ...] = tuple(i / 10 for i in range(11))


def cf_keys(rows: Sequence[Measurement], pooled: bool = False) -> tuple[list[str], list[str]]:
    """Matrix row and column key of each measurement (see ``completion``); ``pooled``: the multi-GPU
    matrix's keys (the GPU count moves from the row to the column)."""
    from slurm_hase.predict.models import fill

    row_key = CF.pooled_key if pooled else CF.workload_key
    wk = [row_key(model_key(m.desc), m.desc, m.desc.batch_size or fill(m.desc).batch_size) for m in rows]
    ck = [CF.column_key(m.gpu, CF.context_key(m.desc.corunner_gflops, m.desc.num_gpus) if pooled
                        else CF.corunner_key(m.desc.corunner_gflops)) for m in rows]
    return wk, ck


def complete(
    rows: Sequence[Measurement], x: Any, y: Any, rounds: int
) -> tuple[CF.Completion | None, CF.Completion | None]:
    """Fit the completions (single-GPU queries; pooled, for multi-GPU ones) and their blend with the
    P50 trees; each is None when inner folds give it no weight.

    Inner 4-fold splits of these rows (random rows for the "seen" level, (model, GPU) pairs for
    "pair"): trees and factorisations (each of CF_RANKS, both matrices) are fitted on the rest; a
    matrix is judged on the held-out rows it would answer (single- or multi-GPU). For each rank and
    blend key (level x row density, ``completion.BLEND_KEYS``) the weight w from BLEND_GRID
    minimising the held-out MAPE of ``exp(trees + w * clip(completion - trees))`` is chosen
    (``Completion.shift``). The rank with the lowest sum of the two levels' MAPEs (rows without
    completion support count with the trees' error) is refitted on all rows."""
    import lightgbm as lgb
    import numpy as np

    keys = {False: cf_keys(rows), True: cf_keys(rows, pooled=True)}
    # per (pooled, rank, level): rows of (trees, completion or nan, truth, row entries)
    held: dict[tuple[bool, int, str], list[tuple[float, float, float, float]]] = {
        (p, r, lv): [] for p in keys for r in CF_RANKS for lv in ("seen", "pair")}
    for split, level in (("random", "seen"), ("pair", "pair")):
        for test in group_folds(rows, split, CF_FOLDS):
            hold = set(test)
            tr = [i for i in range(len(rows)) if i not in hold]
            if len(tr) < 10:
                continue
            tr_rows = [rows[i] for i in tr]
            lvs = levels(tr_rows, [rows[i] for i in test])
            tei = np.asarray([i for i, lv in zip(test, lvs, strict=True)
                              if lv in (("seen",) if level == "seen" else ("pair", "pair-few"))], dtype=np.int64)
            if not len(tei):
                continue
            tri = np.asarray(tr, dtype=np.int64)
            booster = lgb.Booster(model_str=fit_trees(x[tri], y[tri], weights(tr_rows), "regression", rounds))
            s = booster.predict(x[tei], num_threads=1)
            for pooled, (wk, ck) in keys.items():
                mine = [(i, si) for i, si in zip(tei.tolist(), s, strict=True) if (rows[i].desc.num_gpus > 1) == pooled]
                for rank in CF_RANKS if mine else ():
                    comp = CF.fit([wk[i] for i in tr], [ck[i] for i in tr], y[tri], rank=rank, ridge=CF_RIDGE)
                    for i, si in mine:
                        c = comp.score(wk[i], ck[i])
                        held[(pooled, rank, level)].append((float(si), math.nan if c is None else c, float(y[i]),
                                                            float(comp.entries.get(wk[i], 0))))
    out: list[CF.Completion | None] = []
    for pooled, (wk, ck) in keys.items():
        best = _best_blend({(r, lv): v for (p, r, lv), v in held.items() if p == pooled})
        if best is None or not any(best[1].values()):
            out.append(None)
            continue
        final = CF.fit(wk, ck, y, rank=best[0], ridge=CF_RIDGE)
        out.append(final.with_weights({k: w for k, w in best[1].items() if w > 0}))
    return out[0], out[1]


def _best_blend(
    held: dict[tuple[int, str], list[tuple[float, float, float, float]]],
) -> tuple[int, dict[str, float]] | None:
    """(rank, blend weights) with the lowest held-out MAPE (``complete``); None without held-out rows."""
    import numpy as np

    best: tuple[float, int, dict[str, float]] | None = None
    for rank in CF_RANKS:
        total, wts, seen_any = 0.0, {}, False
        for level in ("seen", "pair"):
            arr = np.asarray(held.get((rank, level), []), dtype=float).reshape(-1, 4)
            if not len(arr):
                continue
            seen_any = True
            sup = ~np.isnan(arr[:, 1])
            gap = np.clip(arr[:, 1] - arr[:, 0], -CF.MAX_LOG_SHIFT, CF.MAX_LOG_SHIFT)
            err_sum = float(np.abs(np.expm1(arr[~sup, 0] - arr[~sup, 2])).sum())
            for dense in (True, False):
                m = sup & ((arr[:, 3] >= CF.DENSE_ENTRIES) == dense)
                if not m.any():
                    continue
                errs = [float(np.abs(np.expm1(arr[m, 0] + w * gap[m] - arr[m, 2])).sum()) for w in BLEND_GRID]
                j = int(np.argmin(errs))
                wts[level if dense else f"{level}-sparse"] = BLEND_GRID[j]
                err_sum += errs[j]
            total += err_sum / len(arr)
        if seen_any and (best is None or total < best[0]):
            best = (total, rank, wts)
    return None if best is None else (best[1], best[2])
