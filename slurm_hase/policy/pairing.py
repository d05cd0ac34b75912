"""Pairing waiting jobs on one GPU through MPS (fair's `share_gain` knob, off by default).

A waiting job that opted in (PendingJob.may_share: share=yes, one untyped GPU, a Slurm that
applies the change) becomes a half-GPU MPS share of its routed type k when:

* it is not starting now on a whole GPU (routing found none free for it);
* two copies of it on one GPU would get at least `gain` x one job's work done:
  2 / mps_slowdown[k] >= gain (the predictor's slowdown beside a copy of itself);
* its account holds at least `min_level` x its entitlement (levels.py), so the accounts that
  fairness is for keep whole GPUs (0 = any account);
* fewer than `slots` x k's nodes of shares run or wait for k: Slurm shares one GPU a node
  through MPS (22.05 and 24.11), so shares beyond that would queue for the few shared GPUs
  while whole GPUs go to others.

Measured on the Philly bench (bench/README.md, session 46): gain 1.5, min_level 0.8, slots 2.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from slurm_hase.policy.levels import Levels, level
from slurm_hase.policy.types import ClusterState, PendingJob


def plan_shares(jobs: Sequence[PendingJob], routed: Mapping[str, Sequence[str]],
                starting: Collection[str], state: ClusterState, levels: Levels | None,
                gain: float, min_level: float, slots: float) -> dict[str, int]:
    """Job id -> MPS units (half of one GPU of its routed type) for the jobs of `jobs`, taken
    in order, that become shares (module doc). `starting`: ids of jobs that start now."""
    budget = {k: int(slots * p.nodes) for k, p in state.pools.items() if p.mps_capacity > 1}
    for r in state.running:
        if r.gpu_fraction < 1.0 and r.gpu_type in budget:
            budget[r.gpu_type] -= 1
    out: dict[str, int] = {}
    for job in jobs:
        types = routed.get(job.job_id)
        if not types:
            continue
        k = types[0]
        if job.gpu_fraction < 1.0:  # a share already, waiting for a shared GPU
            if k in budget:
                budget[k] -= 1
            continue
        if not job.may_share or job.job_id in starting or budget.get(k, 0) <= 0:
            continue
        slow = job.mps_slowdown.get(k, 0.0)
        if slow < 1.0 or 2.0 / slow < gain:
            continue
        if min_level > 0 and (levels is None
                              or level(levels[0], levels[1], job.account) < min_level):
            continue
        out[job.job_id] = state.pools[k].mps_capacity // 2
        budget[k] -= 1
    return out
