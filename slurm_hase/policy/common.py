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
from itertools import accumulate

from slurm_hase.errors import PolicyError
from slurm_hase.policy.types import Decision, GpuPool, PendingJob

NICE_MAX = 100_000  # Nice values the policies emit lie in 0..NICE_MAX (10,000 levels)
# Slurm accepts |Nice| <= 2147483645 (NICE_OFFSET - 3); the daemon keeps
# nice_zero * nice_scale within it
SLURM_NICE_LIMIT = 2_147_483_645


def stale_entries_due(entries: int, live: int) -> bool:
    """Whether a per-job cache updated in place (entries of gone jobs left behind) should be
    pruned now: once it holds over twice the live jobs plus 1,024, so pruning stays rare."""
    return entries > 2 * live + 1024


def features_string(gpu_types: Sequence[str]) -> str:
    """Slurm Features expression for a set of allowed GPU types ("a100|v100")."""
    return "|".join(gpu_types)


def parse_features(features: str) -> tuple[str, ...]:
    """Types named in a simple OR constraint ("a100|v100" -> ("a100", "v100")); "" -> ()."""
    text = features.strip().strip("[]()")
    if not text:
        return ()
    return tuple(p.strip().lower() for p in text.split("|") if p.strip())


def only_changes(decisions: Iterable[Decision],
                 pending: Sequence[PendingJob] | Mapping[str, PendingJob]) -> list[Decision]:
    """Keep only the attributes that differ from each job's current nice / features.

    `pending`: the pending jobs, or a mapping job id -> job holding at least the decided ones.
    Requeue decisions (running jobs) are kept as they are. Decisions for unknown job ids are
    dropped; attributes equal to the current value become None; decisions left with nothing to
    change are removed. Order is preserved.
    """
    by_id = pending if isinstance(pending, Mapping) else {j.job_id: j for j in pending}
    out: list[Decision] = []
    for d in decisions:
        if d.requeue:  # about a running job: always an action
            out.append(d)
            continue
        job = by_id.get(d.job_id)
        if job is None:
            continue
        nice, types = changed(job, d.nice, d.gpu_types)
        if nice is None and types is None:
            continue
        out.append(Decision(job_id=d.job_id, nice=nice, gpu_types=types, reason=d.reason))
    return out


def changed(job: PendingJob, nice: int | None, gpu_types: tuple[str, ...] | None
            ) -> tuple[int | None, tuple[str, ...] | None]:
    """(nice, gpu_types) with each attribute equal to the job's current one set to None."""
    if nice is not None and nice == job.nice:
        nice = None
    if gpu_types is not None and features_string(gpu_types) == job.features.strip():
        gpu_types = None
    return nice, gpu_types


def received(usage: float) -> float:
    """An account's decayed service as policies count it: a NaN, infinite or negative value
    (no ledger's: a damaged one) counts as none."""
    return usage if 0.0 < usage < math.inf else 0.0


def unique_jobs(pending: Sequence[PendingJob]) -> Sequence[PendingJob]:
    """`pending` with only the first record of each job id (`pending` itself when no id repeats:
    a state may list a job twice, and a policy keys its work and decisions by id)."""
    first: dict[str, PendingJob] = {}
    for job in pending:
        first.setdefault(job.job_id, job)
    return pending if len(first) == len(pending) else list(first.values())


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


# Knobs that are switches (0 = off, 1 = on) and knobs that count something (whole numbers), by
# name across the policies; every other knob is a real number in its range.
SWITCH_KNOBS = frozenset({"sfq", "rotate", "narrow", "route_by_level", "lift_starting"})
WHOLE_KNOBS = frozenset({"exact_depth", "level_depth", "sticky_from", "max_requeues",
                         "max_restarts", "max_classes"})


def check_knob(name: str, value: float, lo: float, hi: float) -> float:
    """Return value as float if lo <= value <= hi (finite), else raise PolicyError naming it;
    a switch (SWITCH_KNOBS) must be 0 or 1, a count (WHOLE_KNOBS) a whole number."""
    try:
        v = float(value)
    except (TypeError, ValueError) as exc:
        raise PolicyError(f"knob {name!r} must be a number, got {value!r}") from exc
    if not (math.isfinite(v) and lo <= v <= hi):
        raise PolicyError(f"knob {name!r}={value!r} out of range [{lo:g}, {hi:g}]")
    if name in SWITCH_KNOBS and v not in (0.0, 1.0):
        raise PolicyError(f"knob {name!r}={value!r}: a switch, must be 0 (off) or 1 (on)")
    if name in WHOLE_KNOBS and not v.is_integer():
        raise PolicyError(f"knob {name!r}={value!r}: must be a whole number from {lo:g} to {hi:g}")
    return v


NICE_STEP = 10  # nice distance between consecutive levels
NICE_GAP = 16  # levels between consecutive new levels where there is room (room for inserts)
MIN_SPACING = 2  # levels per step a placement window needs (else it grows)


def nice_levels(order: Sequence[PendingJob], step: int = NICE_STEP,
                nice_max: int = NICE_MAX, *, keep: bool = True, gap: int = NICE_GAP) -> list[int]:
    """Nice values that make Slurm (nice first, then age) run `order` in that order.

    A job needs a higher level than the one before it only where it is older (age alone would
    reorder them) or of another account (fairshare would), so one account's queue already in
    submit order gets all zeros. Level L is L * step; levels stop at nice_max // step, where the
    rest of a queue too long for the levels shares the top one.

    With `keep`, the levels jobs already have (their `nice`, in policy units) are kept for the
    largest set of jobs they still order correctly (see `_kept_levels`), and the others get
    levels spread over the room between their kept neighbours, up to `gap` levels apart, so
    that a job arriving between two others later finds a free level: when a job at the head
    starts or one arrives, the rest keep their Nice, and a cycle issues a handful of updates
    instead of renumbering the queue. Without `keep` the levels are compact: 0, then +1 per step.
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
    if not keep:
        out, level = [], 0
        for s in steps:
            level += s
            out.append(min(level, top) * step)
        return out
    # A queue needing more levels than there are: the head, up to a third of the levels, keeps
    # an exact order two levels apart and the rest shares the top level. The last third is
    # room for the head to keep its levels while its front starts and the jobs behind move up.
    cut = len(order)
    if sum(steps) >= top:
        need = 0
        for i, s in enumerate(steps):
            need += s
            if need >= top // 3:
                cut = i
                break
        gap = min(gap, 2)
    levels = _kept_levels(order[:cut], steps[:cut], top - 1 if cut < len(order) else top,
                          step, max(gap, 1))
    return [lv * step for lv in levels] + [top * step] * (len(order) - cut)


def _kept_levels(order: Sequence[PendingJob], steps: Sequence[int], top: int, step: int,
                 gap: int) -> list[int]:
    """Levels (<= top, sum(steps) <= top) keeping the current level of as many jobs as can be.

    R_j = steps needed up to job j. Jobs a before b can both keep their levels c iff
    c_b - c_a >= R_b - R_a, i.e. d = c - R is non-decreasing over the kept jobs (a longest
    non-decreasing subsequence; c >= R + 1 and c + R_last - R <= top leave room for the jobs
    before and after). The others are placed between their kept neighbours; where that leaves
    fewer than MIN_SPACING levels per step (less where the queue is crowded), the window grows
    over its neighbours (doubling) until it has room and is spread out evenly again, as
    order-maintenance lists do, so the next arrivals find free levels instead of renumbering
    the queue one job at a time.
    """
    n = len(order)
    cum = list(accumulate(steps))  # R_j
    total = cum[-1] if cum else 0
    head = 1 if total < top else 0  # the first job above level 0: room in front of it
    cand: list[tuple[int, int]] = []  # (d, index) of jobs whose current nice is a level
    for i, job in enumerate(order):
        nice = job.nice
        if nice >= 0 and nice % step == 0:
            lv = nice // step
            if cum[i] + head <= lv <= top - total + cum[i]:
                cand.append((lv - cum[i], i))
    kept = _longest_nondecreasing(cand)
    # anchors (index, level, R): a virtual start at level 0, the kept jobs, a virtual end that
    # floats up to `top` (gap levels per step where there is room)
    anchors = [(-1, 0, -head)] + [(i, order[i].nice // step, cum[i]) for i in kept]
    anchors.append((n, top, total))
    last = len(anchors) - 1
    # Thresholds relative to the room there is on average: a crowded queue (fewer than
    # 2 x MIN_SPACING levels per step overall) grows windows less, never to the whole queue
    # for one arrival.
    average = top / max(total + head, 1)
    trigger = min(MIN_SPACING, average / 2)
    target = min(2 * MIN_SPACING, 0.75 * average)
    out = [0] * n
    a = 0
    while a < last:
        b = a + 1
        lo, hi, width = a, b, 1
        # jobs to place between them, without room: grow the window (doubling) until, spread
        # out, it leaves room for the next arrivals too
        if ((anchors[b][0] - anchors[a][0] > 1 or b == last)
                and not _roomy(anchors, lo, hi, last, trigger)):
            while not _roomy(anchors, lo, hi, last, target) and (lo > 0 or hi < last):
                lo, hi, width = max(0, lo - width), min(last, hi + width), width * 2
        lv_lo, r_lo = anchors[lo][1], anchors[lo][2]
        lv_hi, r_hi = anchors[hi][1], anchors[hi][2]
        if hi == last:
            lv_hi = min(top, lv_lo + (r_hi - r_lo) * gap)
        m, room = r_hi - r_lo, lv_hi - lv_lo
        for i in range(anchors[lo][0] + 1, min(anchors[hi][0] + 1, n)):
            out[i] = lv_lo + ((2 * (cum[i] - r_lo) * room + m) // (2 * m) if m else 0)
        for k in range(lo + 1, min(hi + 1, last)):  # a later window may grow back over these
            idx = anchors[k][0]
            anchors[k] = (idx, out[idx], cum[idx])
        a = hi
    return out


def _roomy(anchors: Sequence[tuple[int, int, int]], lo: int, hi: int, last: int,
           spacing: float) -> bool:
    m = anchors[hi][2] - anchors[lo][2]
    room = anchors[hi][1] - anchors[lo][1]
    return m <= 0 or room >= spacing * m or (lo == 0 and hi == last)


def _longest_nondecreasing(cand: Sequence[tuple[int, int]]) -> list[int]:
    """Indices (second items) of a longest run of candidates with non-decreasing first items."""
    tails: list[int] = []  # first item of the smallest tail of each run length
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
    kept: list[int] = []
    ci = tail_at[-1] if tail_at else -1
    while ci >= 0:
        kept.append(cand[ci][1])
        ci = back[ci]
    kept.reverse()
    return kept


def water_fill(capacity: float, weights: Mapping[str, float],
               demand: Mapping[str, float]) -> dict[str, float]:
    """Weighted max-min fair split of `capacity`, nobody above its demand (weights default 1).
    An account of weight 0 (Slurm's Fairshare=0) is entitled to nothing: what the others leave
    stays unsplit."""
    out = dict.fromkeys(demand, 0.0)
    left = dict(demand)
    cap = capacity
    while left and cap > 1e-12:
        tot_w = sum(weights.get(a, 1.0) for a in left)
        if tot_w <= 0:
            break  # only accounts of weight 0 still want GPUs
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
