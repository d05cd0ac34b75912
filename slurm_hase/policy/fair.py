"""fair: spatiotemporal sharing fairness with a bounded trade for efficiency (GUIDE §4).

Service: a job on type k delivers f_j * r_jk / r_j* per GPU (fraction x relative speed, MPS
slowdown included). Accounts a have weight w_a (state.shares, default 1) and decayed service
U_a (state.usage, from UsageLedger). Fair = U_a / w_a equal across active accounts.

1. Fair order (start-time fair queueing, SFQ). Account a starts at virtual time
   V_a = (U_a + R_a) / w_a, where R_a is the service its running jobs are still due to deliver
   (num_gpus * f * speed * time left) -- an improvement on using U_a alone: an account that
   just got many GPUs is not treated as starved until its usage catches up (no oscillation).
   Job i of a (submit order) gets start tag S = V_a + (cost of a's earlier pending jobs) / w_a,
   cost = num_gpus * f * best runtime (the normalised service the job will consume,
   independent of where it runs). Jobs sorted by S: the most under-served account goes first,
   and accounts interleave in proportion to their weights.
2. Type routing (Gavel's insight). The fair order is cut into rounds of one cluster's worth of
   GPUs. Inside a round, jobs are served by regret (value on best type - value on second
   best; value = relative speed / MPS slowdown for shares), each taking its most valuable type
   that still has capacity: the jobs that gain most from a fast type get it (largest
   r_jk / r_j* ratio). Routing inside a round never changes who is served in that round, so it
   costs no fairness. Allowed types = the routed type plus types whose value is within
   `tolerance` of it (keeps Slurm work-conserving among near-equivalent types without letting
   low-gain jobs take the fast type). Shares (f < 1) consume f of a GPU, so low-interference
   shares are packed onto the type where they slow down least, which is where Slurm's MPS
   co-locates them.
3. Fairness bound theta. Final key = position_in_fair_order * (1 - theta * value_routed):
   theta = 0 is strict fair order; theta = 1 lets efficient placements go first (pure
   efficiency, HASE-like). A job at fair position p can only be overtaken by jobs at fair
   positions < p / (1 - theta), so over any prefix each account keeps >= (1 - theta) of its fair
   share of starts -- the U_a >= (1 - theta) fair_a bound, in start-order form.
4. Nice from the final order via nice_levels (distinct only where age order would disagree).

Decision semantics: gpu_types -> Features constraint "t1|t2" (lower-case type keys);
nice -> Slurm Nice (higher = later). Pinned jobs get at most a nice. Only changed attributes
are returned (only_changes).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from slurm_hase.policy.common import check_knob, nice_levels, only_changes, usable_types
from slurm_hase.policy.types import ClusterState, Decision, GpuPool, PendingJob, RunningJob


def job_values(job: PendingJob, types: Sequence[str]) -> dict[str, float]:
    """Normalised service per unit of GPU held: r_jk / r_j* (MPS slowdown included for shares)."""
    eff = {}
    for k in types:
        rt = job.runtime_s[k]
        if job.gpu_fraction < 1.0:
            rt *= max(1.0, job.mps_slowdown.get(k, 1.0))
        eff[k] = rt
    best = min(eff.values())
    return {k: best / eff[k] for k in types}


def fair_order(jobs: Sequence[PendingJob], runtimes_best: Mapping[str, float],
               shares: Mapping[str, float], usage: Mapping[str, float],
               running: Sequence[RunningJob], now: float) -> list[PendingJob]:
    """Start-time fair queueing order over accounts (see module docstring, step 1)."""
    due: dict[str, float] = defaultdict(float)
    for r in running:
        due[r.account] += r.num_gpus * r.gpu_fraction * r.relative_speed * max(0.0, r.expected_end - now)
    by_acct: dict[str, list[PendingJob]] = defaultdict(list)
    for j in jobs:
        by_acct[j.account].append(j)
    tagged: list[tuple[float, float, str, PendingJob]] = []
    for acct, queue in by_acct.items():
        w = max(shares.get(acct, 1.0), 1e-12)
        v = (usage.get(acct, 0.0) + due[acct]) / w
        for j in sorted(queue, key=lambda q: (q.submit_time, q.job_id)):
            tagged.append((v, j.submit_time, j.job_id, j))
            v += j.num_gpus * j.gpu_fraction * runtimes_best[j.job_id] / w
    tagged.sort(key=lambda t: (t[0], t[1], t[2]))
    return [t[3] for t in tagged]


def route_types(order: Sequence[PendingJob], values: Mapping[str, Mapping[str, float]],
                pools: Mapping[str, GpuPool]) -> dict[str, str]:
    """Per-round regret routing (module docstring, step 2): job_id -> routed type."""
    cap_total = sum(p.total_gpus for p in pools.values())
    routed: dict[str, str] = {}
    i = 0
    while i < len(order):
        rnd: list[PendingJob] = []
        used = 0.0
        while i < len(order) and (not rnd or used + order[i].num_gpus * order[i].gpu_fraction
                                  <= cap_total):
            used += order[i].num_gpus * order[i].gpu_fraction
            rnd.append(order[i])
            i += 1
        cap = {k: float(p.total_gpus) for k, p in pools.items()}
        prepared = []
        for pos, j in enumerate(rnd):
            ranked = sorted(values[j.job_id].items(), key=lambda kv: (-kv[1], kv[0]))
            regret = ranked[0][1] - ranked[1][1] if len(ranked) > 1 else 2.0
            prepared.append((-regret, pos, j, ranked))
        prepared.sort(key=lambda e: (e[0], e[1]))
        for _, _, j, ranked in prepared:
            need = j.num_gpus * j.gpu_fraction
            pick = next((k for k, _ in ranked if cap[k] + 1e-9 >= need), ranked[0][0])
            cap[pick] -= need
            routed[j.job_id] = pick
    return routed


@dataclass
class FairPolicy:
    """Fair order by account deficit, fast types to the biggest gainers, bounded by theta."""

    theta: float = 0.2
    tolerance: float = 0.05
    name: str = field(default="fair", init=False)
    summary: str = field(default="spatiotemporal fairness: nice by account deficit, fast GPUs "
                                 "to biggest gainers", init=False)

    def __post_init__(self) -> None:
        self.theta = check_knob("theta", self.theta, 0.0, 1.0)
        self.tolerance = check_knob("tolerance", self.tolerance, 0.0, 1.0)

    def decide(self, state: ClusterState) -> list[Decision]:
        """Nice for every schedulable job, type constraint for every untyped one."""
        jobs: list[PendingJob] = []
        values: dict[str, dict[str, float]] = {}
        best_rt: dict[str, float] = {}
        for job in state.pending:
            types = usable_types(job, state.pools)
            if job.pinned_type is not None:
                types = [job.pinned_type] if job.pinned_type in types else []
            if not types:
                continue
            jobs.append(job)
            values[job.job_id] = job_values(job, types)
            best_rt[job.job_id] = min(job.runtime_s[k] for k in types)
        if not jobs:
            return []
        order = fair_order(jobs, best_rt, state.shares, state.usage, state.running, state.now)
        routed = route_types(order, values, state.pools)
        keyed = sorted(
            ((p * (1.0 - self.theta * values[j.job_id][routed[j.job_id]]), p, j)
             for p, j in enumerate(order)), key=lambda t: (t[0], t[1]))
        final = [t[2] for t in keyed]
        decisions = []
        for job, nice in zip(final, nice_levels(final), strict=True):
            types_out: tuple[str, ...] | None = None
            if job.pinned_type is None:
                pick = routed[job.job_id]
                v = values[job.job_id]
                near = sorted((k for k in v if k != pick
                               and abs(v[k] - v[pick]) <= self.tolerance * v[pick]),
                              key=lambda k: (-v[k], k))
                types_out = (pick, *near)
            decisions.append(Decision(job.job_id, nice=nice, gpu_types=types_out,
                                      reason=f"fair: routed {routed[job.job_id]}"))
        return only_changes(decisions, state.pending)
