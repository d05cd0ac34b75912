"""Helpers shared by the policies: decision diffing, feature strings, speeds, knob checks.

Decision semantics (applied identically by the daemon and the simulator):

* ``Decision.gpu_types`` becomes the job's Features constraint ``"t1|t2"`` (node features are
  named by the canonical lower-case GPU type key, e.g. ``a100``, ``v100``, ``t4``).
* ``Decision.nice`` becomes the job's Slurm Nice (higher = later).

``only_changes`` drops every attribute that already matches the job, so a policy run on an
unchanged queue produces no updates at all (no scontrol update storms).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence

from slurm_hase.errors import PolicyError
from slurm_hase.policy.types import Decision, GpuPool, PendingJob

NICE_MAX = 10_000  # Nice values the policies emit lie in 0..NICE_MAX


def features_string(gpu_types: Sequence[str]) -> str:
    """Slurm Features expression for a set of allowed GPU types ("a100|v100")."""
    return "|".join(gpu_types)


def parse_features(features: str) -> tuple[str, ...]:
    """Types named in a simple OR constraint ("a100|v100" -> ("a100", "v100")); "" -> ()."""
    text = features.strip().strip("[]()")
    if not text:
        return ()
    return tuple(p.strip().lower() for p in text.split("|") if p.strip())


def only_changes(decisions: Iterable[Decision], pending: Sequence[PendingJob]) -> list[Decision]:
    """Keep only the attributes that differ from each job's current nice / features.

    Requeue decisions (running jobs) are kept as they are. Decisions for unknown job ids are dropped; attributes equal to the current value become
    None; decisions left with nothing to change are removed. Order is preserved.
    """
    by_id = {j.job_id: j for j in pending}
    out: list[Decision] = []
    for d in decisions:
        if d.requeue:  # about a running job: always an action
            out.append(d)
            continue
        job = by_id.get(d.job_id)
        if job is None:
            continue
        nice = d.nice if d.nice is not None and d.nice != job.nice else None
        types = d.gpu_types
        if types is not None and features_string(types) == job.features.strip():
            types = None
        if nice is None and types is None:
            continue
        out.append(Decision(job_id=d.job_id, nice=nice, gpu_types=types, reason=d.reason))
    return out


def usable_types(job: PendingJob, pools: Mapping[str, GpuPool]) -> list[str]:
    """Types that have a pool, a finite positive runtime for the job, and enough GPUs."""
    n = job.num_gpus
    return sorted(t for t, rt in job.runtime_s.items()
                  if 0.0 < rt < math.inf and t in pools and n <= pools[t].total_gpus > 0)


def relative_speeds(job: PendingJob, types: Sequence[str]) -> dict[str, float]:
    """r_jk / r_j* for each usable type: best runtime / runtime there (in (0, 1])."""
    if not types:
        return {}
    best = min(job.runtime_s[t] for t in types)
    return {t: best / job.runtime_s[t] for t in types}


def check_knob(name: str, value: float, lo: float, hi: float) -> float:
    """Return value as float if lo <= value <= hi (finite), else raise PolicyError naming it."""
    try:
        v = float(value)
    except (TypeError, ValueError) as exc:
        raise PolicyError(f"knob {name!r} must be a number, got {value!r}") from exc
    if not (math.isfinite(v) and lo <= v <= hi):
        raise PolicyError(f"knob {name!r}={value!r} out of range [{lo:g}, {hi:g}]")
    return v


NICE_STEP = 10  # nice distance between consecutive levels


def nice_levels(order: Sequence[PendingJob], step: int = NICE_STEP,
                nice_max: int = NICE_MAX, *, keep: bool = True) -> list[int]:
    """Nice values that make Slurm (nice first, then age) run `order` in that order.

    A job needs a higher level than the one before it only where it is older (age alone would
    reorder them) or of another account (fairshare would), so one account's queue already in
    submit order gets all zeros. Level L is L * step.

    With `keep`, the levels jobs already have (their `nice`, in policy units) are kept for the
    largest set of jobs they still order correctly (see `_kept_levels`), and only the others
    get new ones: when a job at the head starts or one arrives, the rest keep their Nice, so a
    cycle issues a handful of updates instead of renumbering the queue. Without it the levels
    are fresh: 0, then +1 per step (capped at nice_max, which then cannot keep the order).
    """
    steps = [0] * len(order)
    prev: tuple[float, str] | None = None
    prev_account = ""
    for i, job in enumerate(order):
        key = (job.submit_time, job.job_id)
        # on one level Slurm orders by its other factors: age, and fairshare, which differs
        # between accounts, so a change of account needs a level of its own too
        steps[i] = 1 if prev is not None and (key < prev or job.account != prev_account) else 0
        prev, prev_account = key, job.account
    top = nice_max // step
    if keep:
        levels = _kept_levels(order, steps, step, top)
        if levels:
            return [lv * step for lv in levels]
    out, level = [], 0
    for s in steps:
        level += s
        out.append(min(level, top) * step)
    return out


def _kept_levels(order: Sequence[PendingJob], steps: Sequence[int], step: int,
                 top: int) -> list[int]:
    """Levels keeping the current level of the most jobs (a longest non-decreasing subsequence).

    R_j = steps needed up to job j. Jobs a before b can both keep their levels c iff
    c_b - c_a >= R_b - R_a, i.e. d = c - R is non-decreasing over the kept jobs (and d >= 0 so
    that the jobs before the first kept one fit from level 0). The others take the lowest level
    the order allows after the previous job, which never passes the next kept job's.
    """
    need, total = 0, sum(steps)
    cand: list[tuple[int, int]] = []  # (d, index) of jobs whose current nice is a level
    for i, job in enumerate(order):
        need += steps[i]
        nice = job.nice
        # a level the order allows, and that leaves room below `top` for the jobs after it
        if (nice >= 0 and nice % step == 0 and nice // step >= need
                and nice // step + total - need <= top):
            cand.append((nice // step - need, i))
    # patience sorting for the longest non-decreasing run of d, with predecessor links
    tails: list[int] = []  # d of the smallest tail of each run length
    tail_at: list[int] = []  # candidate index of that tail
    back = [-1] * len(cand)
    for ci, (d, _) in enumerate(cand):
        pos = bisect_right(tails, d)
        back[ci] = tail_at[pos - 1] if pos else -1
        if pos == len(tails):
            tails.append(d)
            tail_at.append(ci)
        else:
            tails[pos] = d
            tail_at[pos] = ci
    kept: dict[int, int] = {}
    ci = tail_at[-1] if tail_at else -1
    while ci >= 0:
        i = cand[ci][1]
        kept[i] = order[i].nice // step
        ci = back[ci]
    out, level = [], 0
    for i in range(len(order)):
        level = kept.get(i, level + steps[i])
        out.append(level)
    return out


def water_fill(capacity: float, weights: Mapping[str, float],
               demand: Mapping[str, float]) -> dict[str, float]:
    """Weighted max-min fair split of `capacity`, nobody above its demand (weights default 1)."""
    out = dict.fromkeys(demand, 0.0)
    left = dict(demand)
    cap = capacity
    while left and cap > 1e-12:
        tot_w = sum(weights.get(a, 1.0) for a in left)
        unit = cap / tot_w
        sated = [a for a, d in left.items() if d - out[a] <= unit * weights.get(a, 1.0)]
        if not sated:
            for a in left:
                out[a] += unit * weights.get(a, 1.0)
            break
        for a in sated:
            cap -= left[a] - out[a]
            out[a] = left.pop(a)
    return out


def fast_types(times: Mapping[str, float], slack: float) -> set[str]:
    """Types whose time is within (1 + slack) x the best (finite, positive times only)."""
    ok = {t: v for t, v in times.items() if 0.0 < v < math.inf}
    if not ok:
        return set()
    best = min(ok.values())
    return {t for t, v in ok.items() if v <= (1.0 + slack) * best * (1.0 + 1e-12)}
