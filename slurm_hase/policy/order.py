"""fair's orders: start-time fair queueing over accounts, the routed head, jobs starting now.

fair.py's module docstring describes the steps these implement (1, 2 and the lift of step 4).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from operator import attrgetter

import numpy as np

from slurm_hase.policy.common import received
from slurm_hase.policy.types import ClusterState, PendingJob, RunningJob


def fair_order(jobs: Sequence[PendingJob], best_rt: Sequence[float], shares: Mapping[str, float],
               usage: Mapping[str, float], running: Sequence[RunningJob], now: float,
               age_tau_s: float, due_horizon_s: float = 0.0) -> list[PendingJob]:
    """Start-time fair queueing order over accounts (module docstring, steps 1 and 2).

    `best_rt[i]` is jobs[i]'s best runtime; `due_horizon_s` > 0 caps the time left counted for
    each running job. Inside an account: smallest aged size first (then submit time, then job
    id); job i of account a gets tag V_a + (cost of a's jobs before it) / w_a, and the order is by
    (tag, place in its account, account). An account of share 0 has tags inf: its jobs go behind
    every account with a share, interleaved with the other share-0 accounts' by place. Vectorised: the float operations are those of the
    per-job loop, in the same order (the tags are running sums), so the order is exactly the
    loop's (tests/unit/test_fair_order.py)."""
    n = len(jobs)
    if n == 0:
        return []
    due: dict[str, float] = defaultdict(float)
    for r in running:
        left = max(0.0, r.expected_end - now)
        if due_horizon_s > 0:
            left = min(left, due_horizon_s)
        due[r.account] += r.num_gpus * r.gpu_fraction * r.relative_speed * left
    # columns read with map/attrgetter (C loops): the same numbers as per-job list comprehensions
    accounts = list(map(attrgetter("account"), jobs))
    names = list(dict.fromkeys(accounts))
    ids = {a: k for k, a in enumerate(names)}
    acct = np.fromiter(map(ids.__getitem__, accounts), dtype=np.int64, count=n)
    size, sub, aged = _aged_sizes(jobs, best_rt, now, age_tau_s)
    by_acct = np.lexsort((sub, aged, acct))  # accounts contiguous, smallest aged size first
    _break_ties_by_id(by_acct, jobs, acct, aged, sub)
    acct_s = acct[by_acct]
    bounds = np.flatnonzero(np.diff(acct_s)) + 1
    starts = np.concatenate(([0], bounds))
    stops = np.concatenate((bounds, [n]))
    tags = np.empty(n, dtype=np.float64)
    place = np.arange(n) - np.repeat(starts, stops - starts)
    for lo, hi in zip(starts.tolist(), stops.tolist(), strict=True):
        name = names[int(acct_s[lo])]
        w = shares.get(name, 1.0)
        if not w > 0:  # entitled to nothing (Fairshare=0): behind every account with a share
            tags[lo:hi] = math.inf
            continue
        run = np.empty(hi - lo, dtype=np.float64)
        run[0] = (received(usage.get(name, 0.0)) + due[name]) / w
        run[1:] = size[by_acct[lo:hi - 1]] / w
        tags[lo:hi] = np.cumsum(run)  # sequential sums, as v += cost / w
    rank = {a: k for k, a in enumerate(sorted(names))}
    name_rank = np.array([rank[a] for a in names], dtype=np.int64)[acct_s]
    final = by_acct[np.lexsort((name_rank, place, tags))]
    return list(map(jobs.__getitem__, final.tolist()))


def shortest_first(jobs: Sequence[PendingJob], best_rt: Sequence[float], now: float,
                   age_tau_s: float) -> list[PendingJob]:
    """One order over every account: smallest aged size first, then submit time, then job id
    (the keys of fair_order inside an account; fair's `sfq` = 0, where fairness comes from
    `floor` alone)."""
    n = len(jobs)
    if n == 0:
        return []
    _, sub, aged = _aged_sizes(jobs, best_rt, now, age_tau_s)
    perm = np.lexsort((sub, aged))
    _break_ties_by_id(perm, jobs, np.zeros(n, dtype=np.int64), aged, sub)
    return list(map(jobs.__getitem__, perm.tolist()))


def _aged_sizes(jobs: Sequence[PendingJob], best_rt: Sequence[float], now: float,
                age_tau_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Columns (size = GPUs x fraction x best runtime, submit time, aged size = size / (1 +
    wait / age_tau_s), or size when age_tau_s is 0), read with map/attrgetter (C loops)."""
    n = len(jobs)
    size = (np.fromiter(map(attrgetter("num_gpus"), jobs), dtype=np.float64, count=n)
            * np.fromiter(map(attrgetter("gpu_fraction"), jobs), dtype=np.float64, count=n)
            * np.asarray(best_rt, dtype=np.float64))
    sub = np.fromiter(map(attrgetter("submit_time"), jobs), dtype=np.float64, count=n)
    aged = size / (1.0 + np.maximum(0.0, now - sub) / age_tau_s) if age_tau_s > 0 else size
    return size, sub, aged


def _break_ties_by_id(perm: np.ndarray, jobs: Sequence[PendingJob], acct: np.ndarray,
                      aged: np.ndarray, sub: np.ndarray) -> None:
    """Order runs of equal (account, aged size, submit time) in `perm` by job id, in place."""
    a, g, t = acct[perm], aged[perm], sub[perm]
    same = (a[1:] == a[:-1]) & (g[1:] == g[:-1]) & (t[1:] == t[:-1])
    tied = np.flatnonzero(same)  # k: perm[k] ties with perm[k + 1]
    if tied.size == 0:
        return
    # runs of consecutive k; a run from k0 to k1 covers perm[k0 : k1 + 2]
    cut = np.flatnonzero(np.diff(tied) != 1) + 1
    lows = tied[np.concatenate(([0], cut))].tolist()
    highs = (tied[np.concatenate((cut - 1, [tied.size - 1]))] + 2).tolist()
    for lo, hi in zip(lows, highs, strict=True):
        perm[lo:hi] = sorted(perm[lo:hi].tolist(), key=lambda i: jobs[i].job_id)


def lift_starting(order: Sequence[PendingJob], routed: Mapping[str, Sequence[str]],
                  starting: set[str]) -> list[PendingJob]:
    """`order` with each job in `starting` moved up to just behind the last job before it
    that may use one of its types (module docstring, step 4): past jobs it cannot delay."""
    # nothing moves behind the last starting job: only the part up to it is re-keyed
    end = max((i for i, job in enumerate(order) if job.job_id in starting), default=-1) + 1
    if end == 0:
        return list(order)
    last: dict[str, tuple[int, int]] = {}  # type -> largest anchor of a job using it so far
    keyed = []
    for i, job in enumerate(order[:end]):
        types = routed[job.job_id]
        if job.job_id in starting:
            anchor = max((last[t] for t in types if t in last), default=(-1, 0))
            key = (anchor[0], 1)
        else:
            key = (i, 0)
        for t in types:
            if t not in last or last[t] < key:
                last[t] = key
        keyed.append((key, i, job))
    keyed.sort(key=lambda t: (t[0], t[1]))
    return [t[2] for t in keyed] + list(order[end:])


def head_of(order: Sequence[PendingJob], state: ClusterState, horizon: float,
            depth: int = 0) -> list[PendingJob]:
    """The first jobs of `order` whose GPUs add up to the free GPUs plus horizon x all of the
    cluster's (0 = the whole order), and at most `depth` jobs (0 = no limit)."""
    if depth > 0 and len(order) > depth:
        order = order[:depth]
    if horizon <= 0:
        return list(order)
    budget = sum(max(p.free_gpus, 0) + horizon * p.total_gpus for p in state.pools.values())
    used = 0.0
    for i, job in enumerate(order):
        used += job.num_gpus * job.gpu_fraction
        if used > budget:
            return list(order[:max(i, 1)])
    return list(order)


def sticky_order(order: Sequence[PendingJob], start: int, end: int, moving: set[str],
                 max_level: int) -> list[PendingJob]:
    """`order` with positions start..end-1 in the order of the jobs' current levels.

    A job there that holds a level (Nice <= max_level) and is not in `moving` keeps its place
    relative to the others that do (ties in `order`). The rest stay right behind the held job
    that precedes them in `order` (those before every held job lead). So the jobs deeper than
    `start` are not renumbered every time the fair tags drift; each gets the fair order again
    once it moves up past `start`."""
    part = list(order[start:end])
    held = [(j.nice, i) for i, j in enumerate(part)
            if j.nice <= max_level and j.job_id not in moving]
    if len(held) < 2:
        return list(order)
    held_at = {i for _, i in held}
    lead: list[PendingJob] = []
    behind: dict[int, list[PendingJob]] = defaultdict(list)
    last = -1
    for i, job in enumerate(part):
        if i in held_at:
            last = i
        elif last < 0:
            lead.append(job)
        else:
            behind[last].append(job)
    out = lead
    for _, i in sorted(held):
        out.append(part[i])
        out.extend(behind.get(i, ()))
    return [*order[:start], *out, *order[end:]]
