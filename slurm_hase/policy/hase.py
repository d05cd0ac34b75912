"""HASE: hardware-aware placement — constrain each untyped job to the GPU type that finishes it first.

For each pending job, in submit order, and each GPU type k it can run on:

    T_k  = wait_k + runtime_s[k]                     (completion time from now)
    T'_k = T_k * (1 + beta * max(L_k / L_mean - 1, 0))   (HASE load penalty, beta = 0.8)

wait_k comes from a per-type timeline of whole-GPU availability: idle GPUs are free now, GPUs
of running exclusive jobs free at their expected_end, GPUs hosting MPS shares free at the
latest end among those shares. A job with gpu_fraction < 1 may instead start now in the
spare MPS capacity of a type, at runtime_s[k] * mps_slowdown[k]. L_k is the fraction of type
k's GPUs busy at `now` (including what earlier jobs of this pass were given); L_mean is the
mean over types. The job is constrained to the best type (plus any within `tolerance` of it)
and its choice is reserved in the timeline so later jobs see it. Pinned jobs reserve their
pinned type and are never changed. HASE sets no nice (FIFO order: efficiency only).

Decision semantics: gpu_types -> Features constraint "t1|t2" (lower-case type keys);
nice -> Slurm Nice (higher = later). Only changed attributes are returned (only_changes).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slurm_hase.policy.common import check_knob, only_changes, unique_jobs, usable_types
from slurm_hase.policy.types import ClusterState, Decision, GpuPool, PendingJob, RunningJob


def load_penalty(t: float, load: float, mean_load: float, beta: float) -> float:
    """HASE's T' = T * (1 + beta * max(L / L_mean - 1, 0)); no penalty when L_mean is 0."""
    if mean_load <= 0:
        return t
    return t * (1.0 + beta * max(load / mean_load - 1.0, 0.0))


class Timeline:
    """Per-type sorted whole-GPU availability times plus spare MPS capacity (GPU fractions)."""

    def __init__(self, pools: Mapping[str, GpuPool], running: Sequence[RunningJob],
                 now: float) -> None:
        self.now = now
        self.total = {k: p.total_gpus for k, p in pools.items()}
        self.avail: dict[str, list[float]] = {}
        self.mps_spare: dict[str, float] = {}
        # one pass over the running jobs: whole-GPU end times and MPS shares per type
        ends: dict[str, list[float]] = {k: [] for k in pools}
        shares: dict[str, list[RunningJob]] = {k: [] for k in pools}
        for r in running:
            k = r.gpu_type
            if k not in ends:
                continue
            if r.gpu_fraction >= 1.0:
                end = r.expected_end if r.expected_end > now else now
                ends[k].extend([end] * r.num_gpus)
            else:
                shares[k].append(r)
        for k, pool in pools.items():
            whole = sorted(ends[k])
            free = pool.idle_gpus
            n_mps = max(0, pool.total_gpus - free - len(whole))
            used = sum(r.num_gpus * r.gpu_fraction for r in shares[k])
            mps_end = max([now] + [r.expected_end for r in shares[k]])
            times = [now] * free + whole[: max(0, pool.total_gpus - free)] + [mps_end] * n_mps
            self.avail[k] = sorted(times)[: pool.total_gpus]
            self.mps_spare[k] = max(0.0, n_mps - used)

    def start_whole(self, k: str, n: int) -> float:
        """Earliest time n whole GPUs of type k are free (inf when the type is too small)."""
        a = self.avail.get(k, [])
        return a[n - 1] if 0 < n <= len(a) else float("inf")

    def fits_mps(self, k: str, need: float) -> bool:
        """Whether `need` GPU-fractions fit in spare MPS capacity of k now."""
        return self.mps_spare.get(k, 0.0) + 1e-9 >= need

    def busy_fraction(self, k: str) -> float:
        """L_k: fraction of k's GPUs not free at now."""
        a = self.avail.get(k, [])
        if not a:
            return 0.0
        return (len(a) - bisect.bisect_right(a, self.now)) / len(a)

    def reserve_whole(self, k: str, n: int, start: float, end: float, fraction: float) -> None:
        """Give n GPUs of k from `start` to `end`; a share started now leaves its rest to MPS."""
        a = self.avail[k]
        del a[:n]
        i = bisect.bisect_right(a, end)
        a[i:i] = [end] * n  # as n insorts of the same value
        if fraction < 1.0 and start <= self.now:
            self.mps_spare[k] += n * (1.0 - fraction)

    def reserve_mps(self, k: str, need: float) -> None:
        """Take `need` GPU-fractions of k's spare MPS capacity."""
        self.mps_spare[k] = max(0.0, self.mps_spare[k] - need)


def completion_options(job: PendingJob, types: Sequence[str], tl: Timeline
                       ) -> dict[str, tuple[float, bool, float]]:
    """Per type: (completion time from now, uses MPS spare?, start time)."""
    out: dict[str, tuple[float, bool, float]] = {}
    for k in types:
        rt = job.runtime_s[k]
        start = tl.start_whole(k, job.num_gpus)
        best = (start - tl.now + rt, False, start)
        if job.gpu_fraction < 1.0 and tl.fits_mps(k, job.num_gpus * job.gpu_fraction):
            shared = rt * max(1.0, job.mps_slowdown.get(k, 1.0))
            if shared < best[0]:
                best = (shared, True, tl.now)
        out[k] = best
    return out


@dataclass
class HasePolicy:
    """Greedy smallest-penalised-completion-time type constraint, in submit order."""

    beta: float = 0.8
    tolerance: float = 0.0

    @property
    def name(self) -> str:
        return "hase"

    @property
    def summary(self) -> str:
        return "hardware-aware: constrain each job to the GPU type that finishes it first"

    def __post_init__(self) -> None:
        self.beta = check_knob("beta", self.beta, 0.0, 100.0)
        self.tolerance = check_knob("tolerance", self.tolerance, 0.0, 10.0)

    def decide(self, state: ClusterState) -> list[Decision]:
        """Constrain untyped jobs to their best type; pinned jobs only reserve capacity."""
        tl = Timeline(state.pools, state.running, state.now)
        pending = unique_jobs(state.pending)  # a job listed twice reserves its GPUs once
        order = sorted(pending, key=lambda j: (j.submit_time, j.job_id))
        decisions: list[Decision] = []
        # L_mean is over the types that have GPUs: one with none (all its nodes gone) is no
        # idle type, and counting it at load 0 would penalise every other type more
        loads = {k: tl.busy_fraction(k) for k, a in tl.avail.items() if a}
        for job in order:
            if job.pinned_type is not None:
                types = [job.pinned_type] if job.pinned_type in usable_types(job, state.pools) else []
            else:
                types = usable_types(job, state.pools)
            if not types:
                continue
            opts = completion_options(job, types, tl)
            mean_load = sum(loads.values()) / len(loads) if loads else 0.0
            scored = sorted(
                (load_penalty(opts[k][0], loads[k], mean_load, self.beta), k) for k in types)
            best_t, best_k = scored[0]
            done, via_mps, start = opts[best_k]
            if via_mps:
                tl.reserve_mps(best_k, job.num_gpus * job.gpu_fraction)
            else:
                tl.reserve_whole(best_k, job.num_gpus, start, tl.now + done, job.gpu_fraction)
                loads[best_k] = tl.busy_fraction(best_k)  # only the reserved type changed
            if job.pinned_type is not None:
                continue
            allowed = tuple(k for t, k in scored if t <= best_t * (1.0 + self.tolerance))
            decisions.append(Decision(job.job_id, gpu_types=allowed,
                                      reason=f"hase: {best_k} done in {best_t:.0f}s"))
        return only_changes(decisions, pending)
