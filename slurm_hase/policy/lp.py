"""A small dense simplex solver on numpy (no scipy), enough for Gavel's class-level LP.

Solves   maximise c @ x   subject to   A @ x <= b,  x >= 0,   with b >= 0,
so the all-slack basis is feasible and a single phase suffices. Pivoting uses Dantzig's
largest-coefficient rule and switches to Bland's rule (which cannot cycle) after a run of
degenerate pivots. Exact up to floating-point tolerance `eps`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from slurm_hase.errors import PolicyError

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class LpResult:
    """Optimal x, objective value and number of pivots."""

    x: FloatArray
    objective: float
    pivots: int


def solve_lp(c: FloatArray, a: FloatArray, b: FloatArray, eps: float = 1e-9,
             max_pivots: int = 50_000) -> LpResult:
    """Maximise c@x s.t. a@x <= b, x >= 0 (b >= 0). PolicyError if unbounded or not converged."""
    c = np.asarray(c, dtype=np.float64)
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    m, n = a.shape
    if c.shape != (n,) or b.shape != (m,):
        raise PolicyError(f"lp: shape mismatch c{c.shape} a{a.shape} b{b.shape}")
    if np.any(b < -eps):
        raise PolicyError("lp: needs b >= 0 (origin feasible)")
    tab = np.zeros((m + 1, n + m + 1))
    tab[:m, :n] = a
    tab[:m, n:n + m] = np.eye(m)
    tab[:m, -1] = np.maximum(b, 0.0)
    tab[m, :n] = -c
    basis = np.arange(n, n + m)
    pivots = 0
    degenerate_run = 0
    while True:
        obj_row = tab[m, :-1]
        if degenerate_run > 50:  # Bland: smallest index with negative reduced cost
            cand = np.flatnonzero(obj_row < -eps)
            if cand.size == 0:
                break
            col = int(cand[0])
        else:
            col = int(np.argmin(obj_row))
            if obj_row[col] >= -eps:
                break
        column = tab[:m, col]
        pos = column > eps
        if not np.any(pos):
            raise PolicyError("lp: unbounded")
        ratios = np.full(m, np.inf)
        ratios[pos] = tab[:m, -1][pos] / column[pos]
        best = ratios.min()
        ties = np.flatnonzero(ratios <= best + eps)
        row = int(ties[np.argmin(basis[ties])])  # Bland's tie-break on leaving variable
        degenerate_run = degenerate_run + 1 if best <= eps else 0
        tab[row] /= tab[row, col]
        others = tab[:, col].copy()
        others[row] = 0.0
        tab -= np.outer(others, tab[row])
        basis[row] = col
        pivots += 1
        if pivots > max_pivots:
            raise PolicyError(f"lp: no convergence after {max_pivots} pivots")
    x = np.zeros(n + m)
    x[basis] = tab[:m, -1]
    return LpResult(x=x[:n], objective=float(tab[m, -1]), pivots=pivots)


def max_min_allocation(tput: FloatArray, demand: FloatArray, count: FloatArray,
                       capacity: FloatArray) -> tuple[FloatArray, float]:
    """Gavel's max-min LP over classes.

    tput[c, k]: normalised throughput of one job of class c on type k (0 = cannot run there);
    demand[c]: GPUs one job uses; count[c]: jobs in the class; capacity[k]: GPUs of type k.
    Maximise t s.t. sum_k tput[c,k] X[c,k] >= t, sum_c count_c demand_c X[c,k] <= C_k,
    sum_k X[c,k] <= 1, X >= 0. Returns (X, t). Symmetric within a class (exact by convexity).
    """
    nc, nk = tput.shape
    allowed = np.argwhere(tput > 0)  # variables only where a class can run
    nv = len(allowed) + 1  # last variable is t
    rows = nc + nk + nc
    a = np.zeros((rows, nv))
    b = np.zeros(rows)
    for v, (ci, k) in enumerate(allowed):
        a[ci, v] = -tput[ci, k]  # t - sum tput X <= 0
        a[nc + k, v] = count[ci] * demand[ci]
        a[nc + nk + ci, v] = 1.0
    a[:nc, -1] = 1.0
    a[nc + nk:, -1] = 0.0
    b[nc:nc + nk] = capacity
    b[nc + nk:] = 1.0
    # classes that can run nowhere would pin t to 0; leave them out of the min
    runnable = (tput > 0).any(axis=1)
    a[:nc, -1] = np.where(runnable, 1.0, 0.0)
    c = np.zeros(nv)
    c[-1] = 1.0
    res = solve_lp(c, a, b)
    x = np.zeros((nc, nk))
    for v, (ci, k) in enumerate(allowed):
        x[ci, k] = res.x[v]
    return x, float(res.x[-1])
