"""Account levels: normalised service now / weighted max-min entitlement (the Jain index's terms).

The level of account a is L_a = S_a / e_a, where S_a is the normalised service rate of its
running jobs (GPUs x fraction x speed there / best speed, as in fair.py) and e_a its weighted
max-min share of the managed GPUs capped by its demand (`entitlements`). Jain's index over
accounts (bench/README.md, sim/metrics.py) is taken over exactly these values, so a policy that
raises the lowest levels first is max-min fair in the index's own terms.

fair.py uses levels twice: jobs that start now pick their GPU type lowest level first
(`route_by_level`), and accounts below `floor` x e_a go first in the order (`floor_first`);
rotate.py requeues only where levels stay fair.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from slurm_hase.policy.common import water_fill
from slurm_hase.policy.types import ClusterState, PendingJob, RunningJob

Levels = tuple[dict[str, float], dict[str, float]]  # (service now S_a, entitlement e_a)


def entitlements(state: ClusterState, pending: Sequence[PendingJob]) -> dict[str, float]:
    """Weighted max-min GPUs per active account, capped by demand (held + asked). A GPU of a
    type that is part of a physical GPU (a MIG instance: GpuPool.gpu_share) counts as that
    part, in the capacity, in what a running job holds and in what a pending job asks where
    it may only use such types (the largest part among them); else it asks whole GPUs."""
    demand: dict[str, float] = defaultdict(float)
    parts = {t: pool.gpu_share for t, pool in state.pools.items() if pool.gpu_share != 1.0}
    for r in state.running:
        held = r.num_gpus * r.gpu_fraction
        demand[r.account] += held * parts.get(r.gpu_type, 1.0) if parts else held
    for p in pending:
        asked = p.num_gpus * p.gpu_fraction
        demand[p.account] += (asked * max((parts.get(t, 1.0) for t in p.runtime_s), default=1.0)
                              if parts else asked)
    total = float(sum(pool.total_gpus * pool.gpu_share for pool in state.pools.values()))
    return water_fill(total, state.shares, demand)


def service(r: RunningJob) -> float:
    """Normalised service rate of a running job: GPUs x fraction x speed there / best speed."""
    return r.num_gpus * r.gpu_fraction * r.relative_speed


def account_levels(state: ClusterState, pending: Sequence[PendingJob]) -> Levels:
    """Each account's normalised service rate now and its entitlement (held + asked demand)."""
    held: dict[str, float] = defaultdict(float)
    for r in state.running:
        held[r.account] += service(r)
    return dict(held), entitlements(state, pending)


def level(held: Mapping[str, float], ent: Mapping[str, float], account: str) -> float:
    """S_a / e_a (inf for an account with no entitlement: it is never under-served)."""
    e = ent.get(account, 0.0)
    return held.get(account, 0.0) / e if e > 0 else float("inf")


def floor_first(order: Sequence[PendingJob], levels: Levels, floor: float) -> list[PendingJob]:
    """`order` with the jobs that lift an account towards `floor` x its entitlement first.

    Walking `order`, a job whose account is below the floor (counting the jobs already moved,
    each at its best speed) moves to the front; the moved jobs go lowest level first (then in
    `order`). floor = 0 returns `order` unchanged."""
    if floor <= 0:
        return list(order)
    held = defaultdict(float, levels[0])
    ent = levels[1]
    front: list[tuple[float, int, PendingJob]] = []
    rest: list[PendingJob] = []
    for i, job in enumerate(order):
        lv = level(held, ent, job.account)
        if lv < floor - 1e-9:
            front.append((lv, i, job))
            held[job.account] += job.num_gpus * job.gpu_fraction
        else:
            rest.append(job)
    front.sort(key=lambda t: (t[0], t[1]))
    return [t[2] for t in front] + rest
