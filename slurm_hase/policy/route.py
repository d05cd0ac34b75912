"""Type routing for fair (fair.py step 3), and idle fill.

Routing: pending jobs are walked in the fair order against a timeline of when each type's GPUs
free up (running jobs' expected ends, MPS spare capacity); each job takes the type where it
would *complete* first (wait + runtime there) and reserves it, so later jobs see it. Jobs that
start now (the first round: as many as the free GPUs hold) are placed by regret first
(second-best completion - best): the job that loses most by not getting a fast type gets it
(Gavel's insight). With `levels` they pick lowest account level first (policy/levels.py:
normalised service now / entitlement, updated as each job is placed), by regret inside an
account. Allowed types = the routed type plus types whose predicted completion is within
`tolerance` of it (0 = exactly the routed type).

Idle fill (`fill` > 0, off by default): while the queue is deep, the fair order defers the
long multi-GPU jobs of accounts whose running jobs are still due much service, and those
accounts sit far below their entitlement for hours. After routing, jobs that
- opted in to checkpoint/requeue (PendingJob.preemptible), whole GPUs, not pinned,
- would wait at least `fill_wait_s` for their routed type, and
- belong to an account below `fill` x its entitlement,
take GPUs free now on a slow type (one where they run at most `fill_speed` x their best speed),
lowest account level first (the level counts each placed job, at its speed there), in fair
order inside an account, each on the fastest such type it fits. Such a job is allowed only
that type and goes first in the order (it starts now); the rest of the queue is routed again
around it. Rotation's migration (rotate.py) moves it to a faster type once one is idle; a job
already requeued `max_restarts` times is never filled, as it could not be moved back.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Mapping, Sequence

from slurm_hase.policy.hase import Timeline
from slurm_hase.policy.levels import Levels, level
from slurm_hase.policy.types import ClusterState, PendingJob

Option = tuple[float, str, bool, float]  # (completion from now, type, via MPS, start)
Routing = dict[str, tuple[str, ...]]  # job id -> allowed types, routed first
_EPS = 1e-6


def _options(job: PendingJob, types: Sequence[str], tl: Timeline) -> list[Option]:
    """Completion options per type, earliest first (ties by type name).

    The types of one job are distinct, so the tuples' own order is (completion, type)."""
    out: list[Option] = []
    now, n = tl.now, job.num_gpus
    runtime = job.runtime_s
    shared_ok = job.gpu_fraction < 1.0
    for k in types:
        rt = runtime[k]
        start = tl.start_whole(k, n)
        opt: Option = (start - now + rt, k, False, start)
        if shared_ok and tl.fits_mps(k, n * job.gpu_fraction):
            shared = rt * max(1.0, job.mps_slowdown.get(k, 1.0))
            if shared < opt[0]:
                opt = (shared, k, True, now)
        out.append(opt)
    out.sort()
    return out


def route_types(order: Sequence[PendingJob], types: Mapping[str, Sequence[str]],
                state: ClusterState, tolerance: float, levels: Levels | None = None, *,
                fill: float = 0.0, fill_levels: Levels | None = None, fill_speed: float = 0.5,
                fill_wait_s: float = 0.0, filled: set[str] | None = None,
                starting: set[str] | None = None, max_restarts: int | None = None) -> Routing:
    """Earliest-completion routing along `order`, then idle fill (module docstring).

    `levels` (account service now, entitlement): the jobs that start now pick lowest account
    level first; None = largest regret first. `fill` > 0: idle fill by `fill_levels` (default
    `levels`); `filled` receives the ids of the jobs it placed, `starting` those of every job
    routed to start now (idle-filled ones included). `max_restarts`: jobs requeued that many
    times are not filled (rotation could never move them back to a fast type)."""
    free = sum(p.idle_gpus for p in state.pools.values())
    routed, starts = _route(order, types, Timeline(state.pools, state.running, state.now),
                            tolerance, levels, free, {})
    lv = fill_levels if fill_levels is not None else levels
    placed: Routing = {}
    if fill > 0 and lv is not None:
        waiting = [j for j in order if starts[j.job_id] >= state.now + fill_wait_s + _EPS
                   and (max_restarts is None or j.restarts < max_restarts)]
        if waiting:
            tl = Timeline(state.pools, state.running, state.now)
            free_now = {k: p.idle_gpus for k, p in state.pools.items()}
            placed, lifted = idle_fill(waiting, types, tl, lv, fill, fill_speed, free_now)
            if placed:
                rest = [j for j in order if j.job_id not in placed]
                free -= sum(j.num_gpus for j in order if j.job_id in placed)
                routed, starts = _route(rest, types, tl, tolerance, levels, free, lifted)
                routed.update(placed)
                if filled is not None:
                    filled.update(placed)
    if starting is not None:
        starting.update(placed)
        _starting_now(order, routed, starts, state, starting)
    return routed


def _starting_now(order: Sequence[PendingJob], routed: Routing, starts: Mapping[str, float],
                  state: ClusterState, starting: set[str]) -> None:
    """Add the jobs routed to start now to `starting`, in `order`, while their GPUs fit in
    the ones free now on their type (the timeline also counts busy GPUs it knows no job of
    as available now; those are not free). Jobs already in `starting` take their GPUs first."""
    room = {k: float(p.idle_gpus) for k, p in state.pools.items()}
    for job in order:
        if job.job_id in starting:
            k = routed[job.job_id][0]
            room[k] = room.get(k, 0.0) - job.num_gpus * job.gpu_fraction
    for job in order:
        start = starts.get(job.job_id)
        if start is None or start > state.now + _EPS or job.job_id in starting:
            continue
        k = routed[job.job_id][0]
        need = job.num_gpus * job.gpu_fraction
        if room.get(k, 0.0) + 1e-9 >= need:
            room[k] -= need
            starting.add(job.job_id)


def _route(order: Sequence[PendingJob], types: Mapping[str, Sequence[str]], tl: Timeline,
           tolerance: float, levels: Levels | None, free: float, lifted: Mapping[str, float]
           ) -> tuple[Routing, dict[str, float]]:
    """Route `order` on `tl` with `free` GPUs free now; `lifted`: service the accounts already
    got in this decision. Returns the routing and each job's routed start time."""
    first: list[PendingJob] = []
    used = 0.0
    for job in order:
        need = job.num_gpus * job.gpu_fraction
        if used + need > free + 1e-9:
            break
        used += need
        first.append(job)
    regret: dict[str, float] = {}
    for job in first:
        opts = _options(job, types[job.job_id], tl)
        regret[job.job_id] = opts[1][0] - opts[0][0] if len(opts) > 1 else 0.0
    now = sorted(first, key=lambda j: -regret[j.job_id])
    routed: Routing = {}
    starts: dict[str, float] = {}
    if levels is None:
        for job in now:
            _place(job, types[job.job_id], tl, tolerance, routed, starts)
    else:  # lowest account level first (updated as jobs are placed), largest regret inside
        held, ent = dict(levels[0]), levels[1]
        for a, add in lifted.items():
            held[a] = held.get(a, 0.0) + add
        by_acct: dict[str, list[PendingJob]] = defaultdict(list)
        for job in reversed(now):
            by_acct[job.account].append(job)  # pop() gives the largest regret
        while by_acct:
            acct = min(by_acct, key=lambda a: (level(held, ent, a),
                                               -regret[by_acct[a][-1].job_id], a))
            job = by_acct[acct].pop()
            if not by_acct[acct]:
                del by_acct[acct]
            k = _place(job, types[job.job_id], tl, tolerance, routed, starts)
            best = min(job.runtime_s[t] for t in types[job.job_id])
            held[acct] = held.get(acct, 0.0) + job.num_gpus * job.gpu_fraction * best / job.runtime_s[k]
    for job in order[len(first):]:
        _place(job, types[job.job_id], tl, tolerance, routed, starts)
    return routed, starts


def _place(job: PendingJob, types: Sequence[str], tl: Timeline, tolerance: float,
           routed: Routing, starts: dict[str, float]) -> str:
    """Route `job` to its earliest-completion type, reserve it on `tl`; returns the type."""
    opts = _options(job, types, tl)
    done, k, via_mps, start = opts[0]
    if via_mps:
        tl.reserve_mps(k, job.num_gpus * job.gpu_fraction)
    else:
        tl.reserve_whole(k, job.num_gpus, start, tl.now + done, job.gpu_fraction)
    bound = done * (1.0 + tolerance)
    if len(opts) > 1 and opts[1][0] <= bound:  # opts are sorted: the near ones lead the rest
        routed[job.job_id] = (k, *sorted(o[1] for o in opts[1:] if o[0] <= bound))
    else:
        routed[job.job_id] = (k,)
    starts[job.job_id] = start
    return k


def idle_fill(waiting: Sequence[PendingJob], types: Mapping[str, Sequence[str]], tl: Timeline,
              levels: Levels, fill: float, max_speed: float,
              free_now: Mapping[str, int] | None = None) -> tuple[Routing, dict[str, float]]:
    """Place `waiting` jobs (fair order) on GPUs of `tl` free now (module docstring) and
    reserve them there. Returns job id -> (type,) and the service each account gains.
    `free_now`: GPUs idle now per type (the pools'); the timeline also has busy GPUs at now
    (held by jobs past their expected end or by jobs it knows nothing of), which it may not
    take."""
    spare = {k: bisect.bisect_right(a, tl.now + _EPS) for k, a in tl.avail.items()}
    if free_now is not None:
        spare = {k: min(n, free_now.get(k, 0)) for k, n in spare.items()}
    held, ent = defaultdict(float, levels[0]), levels[1]
    queues: dict[str, list[PendingJob]] = defaultdict(list)
    for job in reversed(waiting):  # pop() gives the first in fair order
        if (job.preemptible and job.gpu_fraction >= 1.0 and job.pinned_type is None
                and level(held, ent, job.account) < fill):
            queues[job.account].append(job)
    placed: Routing = {}
    gain: dict[str, float] = defaultdict(float)
    while queues and any(n > 0 for n in spare.values()):
        acct = min(queues, key=lambda a: (level(held, ent, a), a))
        job = queues[acct].pop()
        if not queues[acct]:
            del queues[acct]
        usable = types[job.job_id]
        best = min(job.runtime_s[t] for t in usable)
        fits = [k for k in usable if spare.get(k, 0) >= job.num_gpus
                and best / job.runtime_s[k] <= max_speed + 1e-9]
        if not fits:
            continue
        k = min(fits, key=lambda t: (job.runtime_s[t], t))
        spare[k] -= job.num_gpus
        tl.reserve_whole(k, job.num_gpus, tl.now, tl.now + job.runtime_s[k], 1.0)
        got = job.num_gpus * best / job.runtime_s[k]
        held[acct] += got
        gain[acct] += got
        placed[job.job_id] = (k,)
        if acct in queues and level(held, ent, acct) >= fill:
            del queues[acct]
    return placed, dict(gain)
