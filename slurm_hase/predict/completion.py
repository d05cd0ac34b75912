"""Collaborative filtering of measured iteration times (as Paragon/Quasar do for interference).

The training rows form a sparse matrix: one row per *workload* (model, local batch, GPU count,
precision, mode), one column per *(GPU type, co-runners)* where the co-runners are the sorted
co-runner GFLOPs and "none" (an exclusive run) is a column of its own. An entry is the learned
target of the trees, ``log(iter_time) - log(roofline time)`` (features.base_of), and the matrix is completed
by a biased low-rank factorisation fitted with alternating ridge least squares::

    y[w, c] = mu + a[w] + b[c] + U[w] . V[c]

A workload's embedding U[w] is shared by every GPU type and co-runner set, so a held-out exclusive
time is completed from the workload's co-located runs (and vice versa), and a (model, GPU type)
pair never measured together from the model on other GPU types and other models on that one.

Multi-GPU (data-parallel) runs are completed by a second, *pooled* factorisation: its rows drop
the GPU count (``pooled_key``: model, local batch, precision, mode) and its columns carry it
(``context_key``: "#n" after the co-runners), so a workload's 2/4/8-GPU times share one embedding
with its single-GPU runs on every GPU type. Single-GPU queries use the per-count matrix above,
multi-GPU queries the pooled one (``is_multi``).

Only rows and columns with at least ``rank + 2`` observed entries are kept (more entries than
parameters); any other query has no completion and the trees alone answer it. The completion is
blended with the trees in log space with a weight per knowledge level of the query and per
density of its workload row (``DENSE_ENTRIES``), both chosen on inner folds (``train.complete``). This module imports
neither numpy nor LightGBM unless a completion is fitted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slurm_hase.predict.descriptor import WorkloadDescriptor

MAX_RANK = 16
# Blend-weight keys: knowledge level ("pair" covers "pair-few") and row density: a workload row with
# fewer than DENSE_ENTRIES observed entries is "sparse" (on the shipped data's random split the
# completion of such rows - Gavel multi-GPU runs with 3 entries, Sia jobs - was worse than the trees).
BLEND_KEYS: tuple[str, ...] = ("seen", "pair", "seen-sparse", "pair-sparse")
DENSE_ENTRIES = 10
# The completion may move the trees' log P50 by at most log(MAX_FACTOR) (the calibration factors'
# bound too). A held-out (model, GPU) pair is an extrapolation: unclipped, a rank-1 completion put
# resnet18-cifar on V100 at up to 1,700x its time (all-pairs MAPE 1,337%; clipped at 2x: 73%).
MAX_FACTOR = 2.0
MAX_LOG_SHIFT = math.log(MAX_FACTOR)


def workload_key(mkey: str, desc: WorkloadDescriptor, batch_size: int) -> str:
    """Matrix row of a workload (``mkey``: ``keys.model_key``; ``batch_size``: the filled local batch)."""
    return f"{mkey}|{batch_size}|{desc.num_gpus}|{desc.precision}|{desc.mode}"


def corunner_key(corunner_gflops: Sequence[float]) -> str:
    """The co-runner part of a matrix column ("" for an exclusive run)."""
    return ";".join(f"{g:.6g}" for g in sorted(corunner_gflops))


def pooled_key(mkey: str, desc: WorkloadDescriptor, batch_size: int) -> str:
    """Row of a workload in the pooled (multi-GPU) matrix: ``workload_key`` without the GPU count."""
    return f"{mkey}|{batch_size}|{desc.precision}|{desc.mode}"


def context_key(corunner_gflops: Sequence[float], num_gpus: int) -> str:
    """The co-runner key, followed by "#n" for an n-GPU job (n > 1): the pooled matrix's column part."""
    c = corunner_key(corunner_gflops)
    return c if num_gpus == 1 else f"{c}#{num_gpus}"


def is_multi(context: str) -> bool:
    """True when a ``context_key`` belongs to a multi-GPU job (a pooled-matrix query)."""
    return "#" in context


def column_key(gpu_key: str, corunner: str) -> str:
    """Matrix column: GPU type and co-runner key."""
    return f"{gpu_key}|{corunner}"


@dataclass(frozen=True)
class Completion:
    """Fitted factors (plain lists: loadable and usable without numpy) and the blend weights.

    ``rows[key] = [a, u_1..u_rank]``, ``cols[key] = [b, v_1..v_rank]``, ``entries[row key]``: the
    row's observed entries; ``weights[key]`` (BLEND_KEYS) is the weight of the completion in the
    log-space blend with the trees (``blend_key``; 0 when absent)."""

    rank: int
    mu: float
    rows: dict[str, list[float]]
    cols: dict[str, list[float]]
    entries: dict[str, int]
    weights: dict[str, float] = field(default_factory=dict)

    def score(self, wkey: str, ckey: str) -> float | None:
        """Completed entry (learned-target units), or None without support."""
        r = self.rows.get(wkey)
        if r is None:
            return None
        c = self.cols.get(ckey)
        if c is None:
            return None
        return self.mu + r[0] + c[0] + sum(r[i] * c[i] for i in range(1, self.rank + 1))

    def shift(self, wkey: str, ckey: str, level: str, s50: float) -> float:
        """What the blend adds to the trees' log P50 ``s50``: ``w * clip(completion - s50)`` (0 without
        support or weight)."""
        y = self.score(wkey, ckey)
        if y is None:
            return 0.0
        w = self.weight(level, wkey)
        return w * min(max(y - s50, -MAX_LOG_SHIFT), MAX_LOG_SHIFT) if w else 0.0

    def weight(self, level: str, wkey: str) -> float:
        """Blend weight for a query of this knowledge level on this row (0 without one)."""
        return self.weights.get(blend_key(level, self.entries.get(wkey, 0)), 0.0)

    def with_weights(self, weights: dict[str, float]) -> Completion:
        """The same factors with other blend weights."""
        return Completion(self.rank, self.mu, self.rows, self.cols, self.entries, dict(weights))

    def as_dict(self) -> dict[str, Any]:
        """The model file's ``completion`` section."""
        return {"rank": self.rank, "mu": self.mu, "weights": self.weights, "rows": self.rows, "cols": self.cols,
                "entries": self.entries}

    @classmethod
    def from_dict(cls, d: object) -> Completion:
        """Inverse of ``as_dict``; ValueError on anything malformed (checked with C builtins)."""
        if not isinstance(d, Mapping):
            raise ValueError("bad completion section")
        rank, mu, weights = d.get("rank"), d.get("mu"), d.get("weights", {})
        if type(rank) is not int or not 0 <= rank <= MAX_RANK:
            raise ValueError(f"completion: bad rank {rank!r}")
        if not isinstance(mu, (int, float)) or isinstance(mu, bool) or not math.isfinite(mu):
            raise ValueError(f"completion: bad mean {mu!r}")
        if not isinstance(weights, Mapping) or not all(
            lv in BLEND_KEYS and type(w) in (int, float) and 0.0 <= w <= 1.0 for lv, w in weights.items()
        ):
            raise ValueError("completion: bad blend weights")
        tables: list[dict[str, list[float]]] = []
        for name in ("rows", "cols"):
            tab = d.get(name)
            if not isinstance(tab, Mapping):
                raise ValueError(f"completion: {name} missing")
            for k, v in tab.items():
                if not isinstance(k, str) or not isinstance(v, list) or len(v) != rank + 1:
                    raise ValueError(f"completion: bad {name} entry {k!r}")
                if not all(type(x) in (int, float) and math.isfinite(x) and abs(x) < 1e6 for x in v):
                    raise ValueError(f"completion: {name} entry {k!r} must hold finite numbers")
            tables.append({k: [float(x) for x in v] for k, v in tab.items()})
        entries = d.get("entries")
        if not isinstance(entries, Mapping) or set(entries) != set(tables[0]) or not all(
            type(v) is int and v >= 0 for v in entries.values()
        ):
            raise ValueError("completion: bad row entry counts")
        return cls(rank, float(mu), tables[0], tables[1], dict(entries), {k: float(w) for k, w in weights.items()})


def blend_key(level: str, entries: int) -> str:
    """Which blend weight a query uses: its knowledge level and whether its row is dense."""
    base = "pair" if level in ("pair", "pair-few") else level
    return base if entries >= DENSE_ENTRIES else f"{base}-sparse"


def fit(
    wkeys: Sequence[str], ckeys: Sequence[str], y: Sequence[float], *, rank: int, ridge: float,
    bias_ridge: float = 0.01, iters: int = 40, seed: int = 0,
) -> Completion:
    """Biased low-rank factorisation of the entries (wkeys[i], ckeys[i]) = y[i] by alternating ridge
    least squares (duplicate entries are averaged, weighted by their count); deterministic."""
    import numpy as np

    wk = sorted(set(wkeys))
    ck = sorted(set(ckeys))
    wi = {k: j for j, k in enumerate(wk)}
    ci = {k: j for j, k in enumerate(ck)}
    n_w, n_c = len(wk), len(ck)
    rw = np.asarray([wi[k] for k in wkeys], dtype=np.int64)
    rc = np.asarray([ci[k] for k in ckeys], dtype=np.int64)
    yy = np.asarray(y, dtype=float)
    s = np.zeros((n_w, n_c))
    cnt = np.zeros((n_w, n_c))
    np.add.at(s, (rw, rc), yy)
    np.add.at(cnt, (rw, rc), 1.0)
    ybar = s / np.maximum(cnt, 1.0)
    mu = float(yy.mean()) if len(yy) else 0.0
    rng = np.random.default_rng(seed)
    u = rng.normal(0.0, 0.1, (n_w, rank))
    v = rng.normal(0.0, 0.1, (n_c, rank))
    a = np.zeros(n_w)
    b = np.zeros(n_c)
    reg = np.diag([ridge] * rank + [bias_ridge])
    for _ in range(iters):
        vx = np.hstack([v, np.ones((n_c, 1))])
        r = cnt * (ybar - mu - b[None, :])
        gram = (cnt @ (vx[:, :, None] * vx[:, None, :]).reshape(n_c, -1)).reshape(n_w, rank + 1, rank + 1)
        sol = np.linalg.solve(gram + reg, (r @ vx)[..., None])[..., 0]
        u, a = sol[:, :rank], sol[:, rank]
        ux = np.hstack([u, np.ones((n_w, 1))])
        r = cnt * (ybar - mu - a[:, None])
        gram = (cnt.T @ (ux[:, :, None] * ux[:, None, :]).reshape(n_w, -1)).reshape(n_c, rank + 1, rank + 1)
        sol = np.linalg.solve(gram + reg, (r.T @ ux)[..., None])[..., 0]
        v, b = sol[:, :rank], sol[:, rank]
    need = rank + 2
    n_row = (cnt > 0).sum(axis=1)
    n_col = (cnt > 0).sum(axis=0)
    rows = {k: [round(float(a[j]), 6), *(round(float(x), 6) for x in u[j])]
            for j, k in enumerate(wk) if n_row[j] >= need}
    cols = {k: [round(float(b[j]), 6), *(round(float(x), 6) for x in v[j])]
            for j, k in enumerate(ck) if n_col[j] >= need}
    entries = {k: int(n_row[j]) for j, k in enumerate(wk) if k in rows}
    return Completion(rank, round(mu, 6), rows, cols, entries)
