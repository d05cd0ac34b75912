"""Evaluate LightGBM tree ensembles without importing LightGBM.

A model is kept as LightGBM's own text format (exact thresholds); this module parses it into flat
arrays and walks them in pure Python (one row, cheap to import) or with numpy (many rows).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from slurm_hase.errors import PredictorError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt


@dataclass(frozen=True)
class Tree:
    """One regression tree; a child < 0 points at leaf ``~child``."""

    feature: tuple[int, ...]
    threshold: tuple[float, ...]
    left: tuple[int, ...]
    right: tuple[int, ...]
    leaf: tuple[float, ...]


def parse_lgb_text(text: str) -> list[Tree]:
    """Trees of a LightGBM text model (numerical splits, no missing-value routing)."""
    trees: list[Tree] = []
    block: dict[str, str] | None = None
    try:
        for line in text.splitlines():
            if line.startswith("Tree="):
                if block is not None:
                    trees.append(_tree(block))
                block = {}
            elif line.startswith("end of trees"):
                break
            elif block is not None and "=" in line:
                k, _, v = line.partition("=")
                block[k] = v
        if block is not None:
            trees.append(_tree(block))
    except (KeyError, ValueError, IndexError) as exc:
        raise PredictorError(f"model file: bad tree data ({exc})") from None
    if not trees:
        raise PredictorError("model file: no trees found")
    return trees


def _tree(b: dict[str, str]) -> Tree:
    leaf = tuple(float(v) for v in b["leaf_value"].split())
    if int(b["num_leaves"]) == 1:
        return Tree((), (), (), (), leaf)
    dt = [int(v) for v in b["decision_type"].split()]
    if any(d & 1 for d in dt) or any((d >> 2) & 3 == 1 for d in dt):
        raise ValueError("categorical or zero-as-missing splits are not supported")
    t = Tree(
        feature=tuple(int(v) for v in b["split_feature"].split()),
        threshold=tuple(float(v) for v in b["threshold"].split()),
        left=tuple(int(v) for v in b["left_child"].split()),
        right=tuple(int(v) for v in b["right_child"].split()),
        leaf=leaf,
    )
    if not len(t.feature) == len(t.threshold) == len(t.left) == len(t.right) == len(leaf) - 1:
        raise ValueError("inconsistent tree arrays")
    return t


def trees_to_lists(t: Tree) -> list[list[float] | list[int]]:
    """JSON-friendly form of a tree (parsed back much faster than LightGBM text)."""
    return [list(t.feature), list(t.threshold), list(t.left), list(t.right), list(t.leaf)]


def trees_from_lists(d: object) -> Tree:
    """Inverse of ``trees_to_lists``; ValueError on a malformed entry (checked with C builtins)."""
    if not isinstance(d, list) or len(d) != 5 or not all(isinstance(a, list) for a in d):
        raise ValueError("bad tree entry")
    feat, thr, left, right, leaf = (tuple(a) for a in d)
    n = len(feat)
    if not len(thr) == len(left) == len(right) == n or len(leaf) != n + 1:
        raise ValueError("inconsistent tree arrays")
    ints = (*feat, *left, *right)
    if not all(type(v) is int for v in ints) or not all(type(v) in (int, float) for v in (*thr, *leaf)):
        raise ValueError("tree arrays must hold numbers")
    if n and (min(feat) < 0 or max(left + right) >= n or min(left + right) < -(n + 1)):
        raise ValueError("tree index out of range")
    return Tree(feat, thr, left, right, leaf)


def predict_one(trees: Sequence[Tree], x: Sequence[float]) -> float:
    """Raw score of one feature row, pure Python."""
    total = 0.0
    for t in trees:
        if not t.feature:
            total += t.leaf[0]
            continue
        node = 0
        feat, thr, left, right = t.feature, t.threshold, t.left, t.right
        while node >= 0:
            node = left[node] if x[feat[node]] <= thr[node] else right[node]
        total += t.leaf[~node]
    return total


def predict_np(trees: Sequence[Tree], x: npt.NDArray[Any]) -> np.ndarray[Any, Any]:
    """Raw scores of many rows with numpy (used when LightGBM is not importable)."""
    import numpy as np

    n = x.shape[0]
    out = np.zeros(n)
    rows = np.arange(n)
    for t in trees:
        if not t.feature:
            out += t.leaf[0]
            continue
        feat = np.asarray(t.feature)
        thr = np.asarray(t.threshold)
        left = np.asarray(t.left)
        right = np.asarray(t.right)
        node = np.zeros(n, dtype=np.int64)
        active = rows
        while active.size:
            nd = node[active]
            go_left = x[active, feat[nd]] <= thr[nd]
            node[active] = np.where(go_left, left[nd], right[nd])
            active = active[node[active] >= 0]
        out += np.asarray(t.leaf)[~node]
    return out
