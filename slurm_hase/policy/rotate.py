"""GPU rotation: which running, checkpointable jobs to requeue so under-served accounts start now.

Non-preemptive fairness can only act when GPUs free up; on heavy-tailed traces (Philly) one
account's week-long jobs then hold its GPUs while other accounts wait. Jobs that opt in
(descriptor ``checkpoint=yes`` and Slurm may requeue them) can be requeued instead: they save
their state, wait again and resume. This module picks them:

1. Entitlement e_a = weighted max-min share of all managed GPUs over active accounts, capped by
   each account's demand (GPUs held + GPUs its pending jobs ask). What an account holds is
   counted as normalised service (GPUs x fraction x speed there / its best speed, as in
   fair.py), so ten slow GPUs are not mistaken for ten fast ones. An account's level is
   held / e_a (the per-account term of the Jain index in bench/README.md).
2. Walk the pending jobs in the order Slurm will try them (the fair order). A job that fits in
   free GPUs of its allowed types takes them (Slurm will start it). A job that does not fit may
   free GPUs on its first allowed type by requeueing jobs there that
   - opted in and have run at least ``min_run_s`` (each run keeps a useful quantum),
   - belong to another account that, without them, is still served at least as well relative
     to its share (held / e) as the waiting job's account will be with it: fairness never gets
     worse, so an under-served account takes from over-served ones, never the reverse; and
     not below ``floor`` x e (fair.py would put its jobs first again: no ping-pong). With
     ``narrow``, the first test is instead that the requeue narrows the gap between the two
     accounts' levels (|a after - b after| < |a before - b before|): a 1-GPU account at level 0
     may then take a GPU from an account at 0.8 (it goes to 1.0, the other to 0.79), which the
     first test refuses; the move back would widen the gap again, so it never ping-pongs,
   - have more predicted time left than the pending job needs there (shortest remaining first:
     a nearly finished job is never stopped for a longer one);
   or belong to the waiting job's own account, have ``srpt_factor`` x its runtime left and
   free no more GPUs than it takes (reordering inside an account never hands the account's
   GPUs to others: an 8-GPU job is not requeued for a 4-GPU one).
   The victims with the most time left go first, and only if they free enough GPUs.
3. Migration (``migrate_margin`` > 0): GPUs of a type still idle after that walk, and that no
   unserved pending job may use, take opted-in jobs running on a slower type when the remaining
   time there (plus ``restart_cost_s``) is below (1 - margin) x the remaining time where they
   are: the job is requeued with the faster type as its constraint.
4. At most ``max_per_cycle`` requeues per call; a job already requeued ``max_restarts`` times is
   left to finish (no job is rotated out forever); whole-GPU jobs only (MPS shares are never
   requeued and never trigger one).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence

from slurm_hase.policy.levels import Levels, account_levels, service
from slurm_hase.policy.types import ClusterState, Decision, PendingJob, RunningJob

_EPS = 1e-9


def _victims(state: ClusterState, min_run_s: float,
             max_restarts: int) -> dict[str, list[RunningJob]]:
    """Requeueable running jobs per GPU type, most predicted time left first."""
    out: dict[str, list[RunningJob]] = defaultdict(list)
    for r in state.running:
        if (r.preemptible and r.gpu_fraction >= 1.0 and state.now - r.start_time >= min_run_s
                and r.restarts < max_restarts):
            out[r.gpu_type].append(r)
    for jobs in out.values():
        jobs.sort(key=lambda r: (-(r.expected_end - state.now), r.job_id))
    return out


def rotation(state: ClusterState, order: Sequence[PendingJob],
             allowed: Mapping[str, Sequence[str]], *, min_run_s: float,
             max_per_cycle: int, requeued_nice: int | None = None,
             srpt_factor: float = 0.0, migrate_margin: float = 0.0,
             restart_cost_s: float = 0.0, yield_factor: float = 1.0,
             max_restarts: int = 1_000_000, floor: float = 0.0,
             levels: Levels | None = None, narrow: bool = False) -> list[Decision]:
    """Requeue decisions for running jobs (module docstring); [] when nothing is worth it.

    `order`: pending jobs in the order Slurm will try them; `allowed`: job id -> the GPU types
    it may use (the Features the policy gives it, best first). `requeued_nice`: the Nice a
    requeued job gets (behind the current order) so Slurm does not restart it at once.
    `levels`: account_levels(state, order) when the caller has it already. `narrow`: the
    gap test between accounts instead of the level test (module docstring, step 2)."""
    if max_per_cycle <= 0:
        return []
    victims = _victims(state, min_run_s, max_restarts)
    if not victims:
        return []
    served: set[str] = set()
    held_now, ent = levels if levels is not None else account_levels(state, order)
    held = defaultdict(float, held_now)  # normalised service rate now (fair.py)
    free = {t: float(max(0, p.free_gpus)) for t, p in state.pools.items()}
    out: list[Decision] = []
    taken: set[str] = set()
    for job in order:
        types = [t for t in allowed.get(job.job_id, ()) if t in free]
        if not types:
            continue
        need_gpus = float(job.num_gpus) if job.gpu_fraction >= 1.0 else 1.0
        best = min(job.runtime_s.get(t, float("inf")) for t in types)
        fit = next((t for t in types if free[t] + _EPS >= need_gpus), None)
        if fit is not None:
            free[fit] -= need_gpus
            held[job.account] += job.num_gpus * job.gpu_fraction * best / job.runtime_s[fit]
            served.add(job.job_id)
            continue
        if job.gpu_fraction < 1.0:
            continue  # an MPS share never triggers a requeue (module docstring, step 4)
        k = types[0]
        share = job.num_gpus * job.gpu_fraction * best / job.runtime_s[k]
        e_a = max(ent.get(job.account, 0.0), _EPS)
        before_a = held[job.account] / e_a  # the waiting account's level now ...
        after_a = (held[job.account] + share) / e_a  # ... and served
        left = job.runtime_s.get(k, float("inf"))
        picks: list[RunningJob] = []
        gain = free[k]
        drop: dict[str, float] = defaultdict(float)
        for v in victims.get(k, ()):
            if gain + _EPS >= need_gpus:
                break
            if v.job_id in taken:
                continue
            remaining = v.expected_end - state.now
            if v.account == job.account:
                # its own much longer job: shortest-remaining-first inside the account
                if srpt_factor <= 0 or remaining <= srpt_factor * left:
                    continue
                if gain + v.num_gpus > need_gpus + _EPS:
                    continue  # would free GPUs its own job does not take: the account loses
            else:
                # fairness may only improve: the victim's account stays at least as well served
                # (relative to its share) as the waiting account will be, or with `narrow` the
                # gap between the two accounts' levels narrows; never below the floor
                e_b = max(ent.get(v.account, 0.0), _EPS)
                kept_b = held[v.account] - drop[v.account]  # before this victim
                level_b = (kept_b - service(v)) / e_b
                if level_b < floor - _EPS:
                    continue
                if narrow:
                    if abs(after_a - level_b) >= abs(before_a - kept_b / e_b) - _EPS:
                        continue
                elif level_b < after_a - _EPS:
                    continue
                if remaining <= max(yield_factor * left, 2.0 * restart_cost_s):
                    continue
            picks.append(v)
            drop[v.account] += service(v)
            gain += v.num_gpus
        if gain + _EPS < need_gpus or not picks:
            continue
        if len(out) + len(picks) > max_per_cycle:
            break
        for v in picks:
            taken.add(v.job_id)
            held[v.account] -= service(v)
            out.append(Decision(v.job_id, requeue=True, nice=requeued_nice,
                                reason=f"rotate: {k} GPUs for job {job.job_id} of {job.account}"))
        free[k] = gain - need_gpus
        held[job.account] += share
        served.add(job.job_id)
    if migrate_margin > 0 and len(out) < max_per_cycle:
        waiting = {t for p in order if p.job_id not in served for t in allowed.get(p.job_id, ())}
        out += migrations(state, victims, free, waiting, taken, margin=migrate_margin,
                          restart_cost_s=restart_cost_s, limit=max_per_cycle - len(out),
                          requeued_nice=requeued_nice)
    return out


def migrations(state: ClusterState, victims: Mapping[str, Sequence[RunningJob]],
               free: Mapping[str, float], waiting: set[str], taken: set[str], *, margin: float,
               restart_cost_s: float, limit: int, requeued_nice: int | None) -> list[Decision]:
    """Move requeueable jobs (`victims`, as _victims gives them) to a faster type that has idle
    GPUs nobody pending waits for.

    A job moves when its remaining time there (plus `restart_cost_s`) is below
    (1 - margin) x its remaining time where it is; the biggest savings go first."""
    room = {t: n for t, n in free.items() if t not in waiting and n >= 1}
    if not room:
        return []
    moves: list[tuple[float, str, RunningJob, str]] = []
    for r in (r for jobs in victims.values() for r in jobs):
        own = r.runtime_s.get(r.gpu_type, 0.0)
        if r.job_id in taken or not 0.0 < own < math.inf:
            continue  # no finite runtime where it runs: nothing to compare with
        here = max(0.0, r.expected_end - state.now)  # an overdue job: nothing left to save
        for t, n in room.items():
            rt = r.runtime_s.get(t, 0.0)
            if t == r.gpu_type or n < r.num_gpus or not 0.0 < rt < math.inf:
                continue
            there = here * rt / own + restart_cost_s
            if there < (1.0 - margin) * here:
                moves.append((here - there, r.job_id, r, t))
    moves.sort(key=lambda m: (-m[0], m[1]))
    left = dict(room)
    out: list[Decision] = []
    for _, _, r, t in moves:
        if len(out) >= limit:
            break
        if r.job_id in taken or left[t] < r.num_gpus:
            continue
        left[t] -= r.num_gpus
        taken.add(r.job_id)
        out.append(Decision(r.job_id, requeue=True, nice=requeued_nice, gpu_types=(t,),
                            reason=f"migrate: {r.gpu_type} -> idle {t}"))
    return out
