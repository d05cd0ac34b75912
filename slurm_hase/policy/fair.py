"""fair: spatiotemporal sharing fairness with a bounded trade for efficiency (GUIDE §4).

Service: a job on type k delivers f_j * r_jk / r_j* per GPU (fraction x relative speed, MPS
slowdown included). Accounts a have weight w_a (state.shares, default 1) and decayed service
U_a (state.usage, from UsageLedger). Fair = U_a / w_a equal across active accounts.

1. Inside an account: smallest predicted service first (SRPT-like). An account's pending jobs
   are served in order of size = num_gpus * f * best runtime, divided by (1 + age / age_tau_s)
   so a long job's key falls as it waits (default 2 h; age_tau_s = 0: pure size order). Reordering inside
   one account does not change how much service the account gets, only which of its jobs gets
   it first; on heavy-tailed durations (Philly) it cuts average JCT the most.
2. Between accounts (start-time fair queueing, SFQ). Account a starts at virtual time
   V_a = (U_a + R_a) / w_a, where R_a is the service its running jobs are still due to deliver
   (num_gpus * f * speed * time left, the time left capped at `due_horizon_s` when > 0): an
   account that just got many GPUs is not treated as starved until its usage catches up (no
   oscillation). Job i of a (in the order of step 1)
   gets start tag S = V_a + (cost of a's jobs before it) / w_a, cost = num_gpus * f * best
   runtime. Jobs sorted by S: the most under-served account goes first, and accounts
   interleave in proportion to their weights. With `sfq` = 0 there is no step 2: one order of
   step 1's keys over every account, and fairness comes from `floor` (step 4) alone.
3. Type routing (policy/route.py). Jobs are walked in the fair order against a timeline of when
   each type's GPUs free up (running jobs' expected ends, MPS spare capacity); each job takes
   the type where it would *complete* first (wait + runtime there) and reserves it, so later
   jobs see it. Jobs that start now (the first round: as many as the free GPUs hold) are
   placed by regret first (second-best completion - best): the job that loses most by not
   getting a fast type gets it (Gavel's insight; largest r_jk / r_j* wins). With
   `route_by_level` (default) they pick lowest account level first (policy/levels.py:
   normalised service now / weighted max-min entitlement, updated as each job is placed), by
   regret inside an account: the fast GPUs that free up go to the least-served account's jobs,
   not to whichever account has the largest-regret job (Gavel's heterogeneity-aware max-min,
   one placement at a time). Allowed types = the routed type plus types whose predicted
   completion is within `tolerance` of it (0 = exactly the routed type).
   Idle fill (`idle_fill` > 0, off by default; route.py): opted-in jobs of accounts below
   idle_fill x their entitlement that would wait `fill_wait_s` for their routed type start now
   on GPUs free on a slow type (<= `fill_speed` x their best speed), lowest level first; they
   go to the front of the order and migration (step 5) later moves them to a fast type. Needs
   PendingJob.preemptible (the daemon's state must fill it in).
4. Fairness bound theta. Final key = position_in_fair_order * (1 - theta * value_routed),
   value = r_jk / r_j* on the routed type: theta = 0 is strict fair order; theta = 1 lets
   efficient placements go first. A job at fair position p can only be overtaken by jobs at
   positions < p / (1 - theta), so over any prefix each account keeps >= (1 - theta) of its
   fair share of starts -- the U_a >= (1 - theta) fair_a bound, in start-order form.
   Jobs the routing starts now (on GPUs free now that no job before them is routed to) then
   move up to just behind the last job before them that may use one of their types
   (`lift_starting`, on by default): they cannot delay the jobs they pass, and Slurm looks only
   bf_max_job_test jobs deep, so a job starting now on an idle type at fair position 700 would
   otherwise leave that type idle cycle after cycle (on the 100k-job speed trace, 318 K80s sat
   idle for days beside 1,657 pending jobs, 26 of them routed to start on those K80s now).
   Floor (`floor` > 0, off by default): before routing, jobs of accounts whose level is below
   floor go to the front, lowest level first (levels.floor_first): an instantaneous guarantee on
   top of the cumulative SFQ order, which otherwise defers accounts with long running jobs.
5. Rotation (policy/rotate.py): running jobs that opted in to checkpoint/requeue may be
   requeued so that an under-served account's job starts now instead of when GPUs free up, or
   moved to idle faster GPUs (`migrate_margin`; also when nothing is pending).
6. Nice from the final order via nice_levels (distinct only where age order would disagree;
   jobs keep the Nice they have wherever it still orders them right, so a cycle makes few
   updates). Only the first `exact_depth` jobs of the order (default 1,000: twice Slurm's default
   bf_max_job_test = 500, the deepest it looks in a backfill pass) are routed and ordered, and with
   `horizon` > 0 only those whose GPUs add up to the free ones + horizon x the cluster's; the
   deeper queue waits behind them at the top Nice, and rotation considers only the head. Of the
   head, the first `level_depth` jobs (default 600: 1.2 x bf_max_job_test) get exact levels and
   the rest one level behind them, so jobs Slurm cannot reach before the next cycle are not
   renumbered every time the order deep in the head shifts. The daemon's nice_scale must make
   one level outweigh Slurm's age + fairshare terms (CycleConfig.nice_scale ~ sum of
   PriorityWeight* / 10), or Slurm reorders accounts itself. With `sticky_from` > 0 (off by
   default), jobs past that position of the head that hold a level keep the order of their
   levels (order.py sticky_order): fewer updates while the tags drift.

Decision semantics: gpu_types -> Features constraint "t1|t2" (lower-case type keys);
nice -> Slurm Nice (higher = later). Pinned jobs get at most a nice. Only changed attributes
are returned (only_changes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from slurm_hase.policy.common import (
    NICE_MAX,
    NICE_STEP,
    changed,
    check_knob,
    fast_types,
    nice_levels,
    stale_entries_due,
    unique_jobs,
    usable_types,
)
from slurm_hase.policy.levels import Levels, account_levels, floor_first
from slurm_hase.policy.order import (
    fair_order,
    head_of,
    lift_starting,
    shortest_first,
    sticky_order,
)
from slurm_hase.policy.pairing import plan_shares
from slurm_hase.policy.rotate import rotation
from slurm_hase.policy.route import route_types
from slurm_hase.policy.types import ClusterState, Decision, PendingJob


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


def _same_inputs(before: PendingJob, now: PendingJob) -> bool:
    """Whether a job's usable types, values and best runtime are those of its earlier record:
    the same runtime and slowdown mappings (the very objects) and the same shape and pin."""
    return (before.runtime_s is now.runtime_s and before.mps_slowdown is now.mps_slowdown
            and before.num_gpus == now.num_gpus and before.gpu_fraction == now.gpu_fraction
            and before.pinned_type == now.pinned_type)


@dataclass
class FairPolicy:
    """Fair order by account deficit, shortest first inside accounts, earliest-completion types."""

    theta: float = 0.2
    tolerance: float = 0.0
    # Route and order exactly only the head of the fair order: jobs whose GPUs add up to the
    # free GPUs + horizon x the cluster's GPUs (0 = the whole queue, the default). The rest wait
    # behind at the top Nice and keep their constraint: a deep queue then costs less routing
    # time and fewer Nice updates, but backfill takes the rest in age order (on the Philly
    # bench, horizon 1 raised average JCT 1-3%, 0.25 about 10%).
    horizon: float = 0.0
    # Route and order exactly at most this many jobs at the head of the fair order (0 = all);
    # the rest wait behind at the top Nice as beyond the horizon. Slurm itself never looks
    # deeper than bf_max_job_test jobs (default 500) in one backfill pass, nor the main
    # scheduler beyond default_queue_depth (100), so a depth well above those plus the jobs
    # that start in one cycle leaves what Slurm starts unchanged, while a queue of 10^4 jobs
    # costs a cycle no more routing, ordering and Nice updates than one of `exact_depth` jobs.
    # It is raised to twice the depth Slurm's passes look at where the state says (the daemon
    # reads SchedulerParameters at start), so a site with a larger bf_max_job_test is covered.
    # Default: twice Slurm's default depth (docs/daemon.md has what 1,000 vs 2,000 changes).
    exact_depth: float = 1000.0
    # Of the routed head, only the first level_depth jobs get exact Nice levels (0 = all); the
    # rest share one level behind them (a job keeps a Nice that is already behind them). It is
    # raised to 1.2 x the depth Slurm's passes look at: the jobs Slurm may try before the next
    # cycle, plus room for the ones that start meanwhile. On the 100k-job speed trace 600
    # leaves every cycle's pending count as with exact levels for the whole head (2,500 cycles)
    # with 40% fewer updates; 500 changed them (docs/daemon.md).
    level_depth: float = 600.0
    age_tau_s: float = 7200.0
    # Past this position of the routed head (0 = off), jobs that hold an exact level keep the
    # order of their levels instead of the fair order (policy/order.py sticky_order): fewer
    # Nice updates while the fair tags drift; a job gets the fair order once it moves up.
    sticky_from: float = 0.0
    # Jobs the routing starts now move ahead of the jobs before them that use none of their
    # types (1; 0 = off): step 4.
    lift_starting: float = 1.0
    # Count a running job's due service (step 2's R_a) over at most this many seconds of its
    # remaining time (0 = all of it). An account holding a long job is then not deferred for
    # the job's whole remaining service. Off by default: on the Philly bench (fair-0.2+ckpt,
    # seeds 0-2) 36 h gave average JCT 0.479x -> 0.486x Slurm's, Jain 0.925 -> 0.934, and with
    # floor 0.6 0.522x / 0.952; without requeue it took JCT past 0.5x (bench/README.md).
    due_horizon_s: float = 0.0
    # Order between accounts by start-time fair queueing (1, step 2), or not at all (0): one
    # shortest-first order over every account, fairness then from `floor` alone. With floor 0.6
    # and requeue this is the better fairness-first setting on the Philly bench (Jain 0.95 at
    # ~0.51x Slurm's JCT, against ~0.52x with SFQ; bench/README.md).
    sfq: float = 1.0
    # Requeue opted-in running jobs for under-served accounts (policy/rotate.py): 0 = never.
    rotate: float = 1.0
    min_run_s: float = 600.0  # a job runs at least this long before it may be requeued
    max_requeues: float = 8.0  # per decision
    max_restarts: float = 3.0  # a job requeued this many times is left to finish
    # Requeue an account's own job for its pending job when it has this many times more left
    # (0 = never: only under-served accounts trigger requeues).
    srpt_factor: float = 2.0
    # Move opted-in jobs to idle faster GPUs when that saves this share of their remaining
    # time, counting restart_cost_s for the checkpoint restart (0 = never).
    migrate_margin: float = 0.3
    # An over-share account's job yields its GPUs only if it has more than yield_factor x the
    # waiting job's runtime left (1 = shortest remaining first; 0 = fairness alone decides,
    # as long as 2 x restart_cost_s is left).
    yield_factor: float = 1.0
    # Rotation's fairness test between two accounts (policy/rotate.py): 0 = the victim's
    # account stays at least as well served as the waiting account will be; 1 = the requeue
    # narrows the gap between their levels. Off by default: on the Philly bench it helps only
    # with a short daemon cycle (15 s: Jain +0.010 at the same JCT, bench/README.md session 23).
    narrow: float = 0.0
    restart_cost_s: float = 300.0
    # Jobs that start now pick their GPU type lowest account level first (1) or largest regret
    # first (0): module docstring, step 3.
    route_by_level: float = 1.0
    # Jobs of accounts below floor x their entitlement (normalised service now / weighted
    # max-min GPUs capped by demand) go first, lowest level first (0 = off): step 4.
    floor: float = 0.0
    # Idle fill (policy/route.py): opted-in jobs of accounts below idle_fill x their entitlement
    # take GPUs free now on a slow type, lowest level first (0 = off, the default: on the Philly
    # bench, fair-0.2+ckpt, 0.5 gave Jain 0.933 -> 0.944 for average JCT 0.485x -> 0.498x
    # Slurm's; the 0.95 target is not met) ...
    idle_fill: float = 0.0
    fill_speed: float = 0.5  # ... on types where they run at most this x their best speed
    fill_wait_s: float = 7200.0  # ... when they would wait this long for their routed type
    # Pairing (policy/pairing.py): waiting opted-in (share=yes) 1-GPU jobs become half-GPU MPS
    # shares when two on one GPU get share_gain x one job's work done (0 = off, the default) ...
    share_gain: float = 0.0
    share_level: float = 0.8  # ... for accounts at >= this x their entitlement ...
    share_slots: float = 2.0  # ... and at most this x a type's nodes of shares there
    # Per pending record: (record, usable types, values, best runtime), reused while the daemon
    # passes the very same record (an unchanged job) and the pools' sizes are unchanged. Entries
    # of jobs gone since are harmless (each is used only for the record it was built from or
    # one with the same inputs) and are dropped in bulk once they outnumber the pending jobs.
    _memo: dict[str, tuple[PendingJob, list[str], dict[str, float], float]] = field(
        default_factory=dict, init=False, repr=False, compare=False)
    _memo_pools: tuple[tuple[str, int], ...] = field(default=(), init=False, repr=False,
                                                     compare=False)

    @property
    def name(self) -> str:
        return "fair"

    @property
    def summary(self) -> str:
        return "spatiotemporal fairness: nice by account deficit, fast GPUs to biggest gainers"

    def __post_init__(self) -> None:
        # set here too: a class compiled with mypyc (bench/README.md) leaves init=False fields unset
        self._memo, self._memo_pools = {}, ()
        self.theta = check_knob("theta", self.theta, 0.0, 1.0)
        self.tolerance = check_knob("tolerance", self.tolerance, 0.0, 1.0)
        self.horizon = check_knob("horizon", self.horizon, 0.0, 1e6)
        self.exact_depth = check_knob("exact_depth", self.exact_depth, 0.0, 1e9)
        self.level_depth = check_knob("level_depth", self.level_depth, 0.0, 1e9)
        self.age_tau_s = check_knob("age_tau_s", self.age_tau_s, 0.0, 1e9)
        self.sticky_from = check_knob("sticky_from", self.sticky_from, 0.0, 1e9)
        self.lift_starting = check_knob("lift_starting", self.lift_starting, 0.0, 1.0)
        self.due_horizon_s = check_knob("due_horizon_s", self.due_horizon_s, 0.0, 1e9)
        self.sfq = check_knob("sfq", self.sfq, 0.0, 1.0)
        self.rotate = check_knob("rotate", self.rotate, 0.0, 1.0)
        self.min_run_s = check_knob("min_run_s", self.min_run_s, 0.0, 1e9)
        self.max_requeues = check_knob("max_requeues", self.max_requeues, 0.0, 1e6)
        self.max_restarts = check_knob("max_restarts", self.max_restarts, 0.0, 1e6)
        self.srpt_factor = check_knob("srpt_factor", self.srpt_factor, 0.0, 1e6)
        self.migrate_margin = check_knob("migrate_margin", self.migrate_margin, 0.0, 1.0)
        self.restart_cost_s = check_knob("restart_cost_s", self.restart_cost_s, 0.0, 1e9)
        self.yield_factor = check_knob("yield_factor", self.yield_factor, 0.0, 1e6)
        self.narrow = check_knob("narrow", self.narrow, 0.0, 1.0)
        self.route_by_level = check_knob("route_by_level", self.route_by_level, 0.0, 1.0)
        self.floor = check_knob("floor", self.floor, 0.0, 1.0)
        self.idle_fill = check_knob("idle_fill", self.idle_fill, 0.0, 1e6)
        self.fill_speed = check_knob("fill_speed", self.fill_speed, 0.0, 1.0)
        self.fill_wait_s = check_knob("fill_wait_s", self.fill_wait_s, 0.0, 1e9)
        self.share_gain = check_knob("share_gain", self.share_gain, 0.0, 2.0)
        self.share_level = check_knob("share_level", self.share_level, 0.0, 1e6)
        self.share_slots = check_knob("share_slots", self.share_slots, 0.0, 1e6)

    def decide(self, state: ClusterState) -> list[Decision]:
        """Nice for every schedulable job, type constraint for every untyped one."""
        jobs: list[PendingJob] = []
        best_rt: list[float] = []
        pools_key = tuple((t, p.total_gpus) for t, p in state.pools.items())
        if self._memo_pools != pools_key:
            self._memo, self._memo_pools = {}, pools_key
        memo = self._memo  # updated in place: an unchanged record costs no insert
        pending = unique_jobs(state.pending)  # one record per job id: the memo is keyed by id
        for job in pending:
            entry = memo.get(job.job_id)
            if entry is None or entry[0] is not job:
                if entry is not None and _same_inputs(entry[0], job):
                    entry = (job, entry[1], entry[2], entry[3])  # only its Nice/Features moved
                else:  # a new record: derive its values
                    types = usable_types(job, state.pools)
                    if job.pinned_type is not None:
                        types = [job.pinned_type] if job.pinned_type in types else []
                    entry = (job, types, job_values(job, types) if types else {},
                             min((job.runtime_s[k] for k in types), default=0.0))
                memo[job.job_id] = entry
            if entry[1]:
                jobs.append(job)
                best_rt.append(entry[3])
        if stale_entries_due(len(memo), len(pending)):  # entries of gone jobs
            self._memo = {j.job_id: memo[j.job_id] for j in pending}
        if not jobs:  # nothing to order; idle faster GPUs may still take opted-in jobs
            return self._rotation(state, [], {}, None) if self.migrate_margin > 0 else []
        if self.sfq > 0:
            order = fair_order(jobs, best_rt, state.shares, state.usage, state.running,
                               state.now, self.age_tau_s, self.due_horizon_s)
        else:
            order = shortest_first(jobs, best_rt, state.now, self.age_tau_s)
        acct = (account_levels(state, jobs) if self.route_by_level > 0 or self.floor > 0
                or self.idle_fill > 0 or self.share_gain > 0 else None)
        if acct is not None and self.floor > 0:
            order = floor_first(order, acct, self.floor)
        depth = int(self.exact_depth)
        if depth > 0:  # never shallower than twice what Slurm's own passes look at
            depth = max(depth, 2 * state.scheduler_depth)
        head = head_of(order, state, self.horizon, depth)
        usable = {j.job_id: memo[j.job_id][1] for j in head}
        filled: set[str] = set()  # idle-filled jobs go first: they start now
        starting: set[str] = set()
        routed = route_types(head, usable, state, self.tolerance,
                             acct if self.route_by_level > 0 else None, fill=self.idle_fill,
                             fill_levels=acct, fill_speed=self.fill_speed,
                             fill_wait_s=self.fill_wait_s, filled=filled,
                             starting=starting if self.lift_starting > 0 else None,
                             max_restarts=int(self.max_restarts))
        keyed = sorted(
            ((-1.0 if j.job_id in filled
              else p * (1.0 - self.theta * memo[j.job_id][2][routed[j.job_id][0]]), p, j)
             for p, j in enumerate(head)), key=lambda t: (t[0], t[1]))
        final = [t[2] for t in keyed]
        if self.lift_starting > 0:
            final = lift_starting(final, routed, starting)
        if self.sticky_from > 0:
            final = sticky_order(final, int(self.sticky_from),
                                 self._cut(state.scheduler_depth) or len(final),
                                 starting | filled, NICE_MAX - 3 * NICE_STEP)
        levels = self._levels(final, state.scheduler_depth)
        shares = (plan_shares(final, routed, starting | filled, state, acct, self.share_gain,
                              self.share_level, self.share_slots) if self.share_gain > 0 else {})
        # only what changes, as only_changes would keep it (most of the head is unchanged)
        decisions = []
        for pos, (job, level) in enumerate(zip(final, levels, strict=True), start=1):
            allowed = routed[job.job_id]
            nice, to_types = changed(job, level, allowed if job.pinned_type is None else None)
            share = shares.get(job.job_id)
            if nice is not None or to_types is not None or share is not None:
                decisions.append(Decision(
                    job.job_id, nice=nice, gpu_types=to_types, mps_share=share,
                    reason=f"fair: {pos} of {len(order)} in the fair order; routed "
                           f"{allowed[0]}, where it completes first"
                           + (f"; shares a GPU (MPS {share})" if share is not None else "")))
        for job in order[len(head):]:
            # beyond the horizon: behind every routed job; a job never routed gets the types
            # within 2x of its best (as hsbatch would), so backfill cannot put it on a slow one
            fast = None
            if job.nice == NICE_MAX and (job.features or job.pinned_type is not None):
                continue  # nothing would change
            if job.pinned_type is None and not job.features:
                fast = tuple(sorted(fast_types({t: job.runtime_s[t] for t in memo[job.job_id][1]},
                                               1.0)))
            nice, to_types = changed(job, NICE_MAX, fast)
            if nice is not None or to_types is not None:
                decisions.append(Decision(job.job_id, nice=nice, gpu_types=to_types,
                                          reason="fair: beyond the routed head of the "
                                                 "order: waits behind it"))
        final += order[len(head):]
        return decisions + self._rotation(state, final, routed, acct)

    def _cut(self, scheduler_depth: int) -> int:
        """How many jobs of the routed head get exact levels (0 = all)."""
        cut = int(self.level_depth)
        return max(cut, (6 * scheduler_depth + 4) // 5) if cut > 0 else 0

    def _levels(self, final: Sequence[PendingJob], scheduler_depth: int) -> list[int]:
        """Nice levels of the routed head: exact for its first `level_depth` jobs, and one
        level behind them for the rest, where a job keeps a Nice that is already behind them."""
        cut = self._cut(scheduler_depth)
        tail = NICE_MAX - NICE_STEP
        if cut <= 0 or len(final) <= cut:
            return nice_levels(final, nice_max=tail)
        exact = nice_levels(final[:cut], nice_max=tail - NICE_STEP)
        last = max(exact)
        return exact + [j.nice if last < j.nice <= tail else tail for j in final[cut:]]

    def _rotation(self, state: ClusterState, order: Sequence[PendingJob],
                  routed: Mapping[str, Sequence[str]], acct: Levels | None) -> list[Decision]:
        """Requeue decisions for opted-in running jobs (policy/rotate.py); [] when off."""
        if self.rotate <= 0 or not state.running:
            return []
        return rotation(state, order, routed, min_run_s=self.min_run_s,
                        max_per_cycle=int(self.max_requeues), requeued_nice=NICE_MAX,
                        srpt_factor=self.srpt_factor, migrate_margin=self.migrate_margin,
                        restart_cost_s=self.restart_cost_s, yield_factor=self.yield_factor,
                        max_restarts=int(self.max_restarts), floor=self.floor, levels=acct,
                        narrow=self.narrow > 0)
