"""One scheduling cycle: observe Slurm, build a ClusterState, decide, plan safe updates, act.

Everything comes in through arguments (backend, policy, estimator, clock, ledger, shares,
config): the daemon passes the real ones, the simulator passes its in-memory Slurm and a
simulated clock. Nothing here sleeps, reads config files or knows whether it is simulating.
All steps are O(jobs + nodes) apart from the policy itself.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import pairwise
from time import perf_counter
from typing import Protocol

from slurm_hase.daemon.act import apply_updates
from slurm_hase.daemon.digest import job_digest, state_digest
from slurm_hase.daemon.quiet import QuietWatch, same_job_set
from slurm_hase.daemon.records import DEFAULT_BEGIN_HORIZON_S
from slurm_hase.daemon.requeue import apply_requeues, plan_requeues
from slurm_hase.daemon.reset import reset_update
from slurm_hase.daemon.safety import (
    OwnedAttrs,
    plan_updates,
    record_intent,
    record_owned,
    restore_owned,
    settle_owned,
)
from slurm_hase.daemon.state import (
    JobEstimate,
    RuntimeEstimator,
    StateCache,
    _build_state,
    _cache_for,
    build_state,
    job_in_partitions,
)
from slurm_hase.errors import PolicyError, SlurmError
from slurm_hase.policy.common import NICE_MAX
from slurm_hase.policy.types import ClusterState, Decision, Policy
from slurm_hase.policy.usage import UsageLedger
from slurm_hase.slurm.backend import SlurmBackend
from slurm_hase.slurm.tres import updates_pending_gres
from slurm_hase.slurm.types import Job, JobState, JobUpdate, Node

__all__ = [
    "DEFAULT_REFRESH_S", "STAGES", "Clock", "CycleConfig", "CycleResult", "JobEstimate", "OwnedAttrs", "QuietWatch",
    "RuntimeEstimator", "StateCache", "build_state", "job_in_partitions", "observe", "plan_updates", "run_cycle", "state_digest",
]

log = logging.getLogger("slurm_hase.daemon")
STAGES = ("observe", "state", "decide", "plan", "act")  # a cycle's steps (CycleResult.stages)
DEFAULT_REFRESH_S = 600.0  # CycleConfig.refresh_s's default (a plain name: compiled, bench/README)


class Clock(Protocol):
    """Where `now` comes from (wall clock in the daemon, simulated time in the simulator)."""

    def now(self) -> float: ...


@dataclass(frozen=True)
class CycleConfig:
    """Per-cycle settings."""

    partitions: tuple[str, ...] | None = None  # None = all
    dry_run: bool = False
    nice_min_delta: int = 1  # ignore Nice changes smaller than this (no update storms)
    nice_limit: int = NICE_MAX  # clamp Nice to [-limit, limit] x nice_scale
    nice_quantum: int = 1  # round Nice to multiples (fewer distinct updates -> batched calls)
    # Multiply the policy's Nice so its order outweighs multifactor's other terms: about
    # (sum of PriorityWeight*) / 10, since policies step Nice by 10 per level.
    nice_scale: int = 1
    # The policy Nice that becomes Slurm Nice 0: Slurm Nice = (policy Nice - nice_zero) *
    # nice_scale. Slurm floors a job's priority at 1, so a positive Nice larger than the other
    # factors' sum flattens the order; with nice_zero = NICE_MAX (100000) every policy level
    # maps to Nice <= 0 and only raises priority (a negative Nice needs root or SlurmUser,
    # which the daemon is). 0 = the policy's Nice as it is (positive, floors on most sites).
    nice_zero: int = 0
    gpu_types: tuple[str, ...] | None = None  # manage only these GPU types (None = all seen)
    update_workers: int = 1  # concurrent scontrol updates (backend must be thread-safe if > 1)
    batch_updates: bool = False  # one update_job("1,2,3", u) per identical update (see act.py)
    # Requeue (rotation) of opted-in running jobs: off unless the admin turns it on.
    requeue: bool = False
    requeue_max: int = 8  # requeues per cycle at most
    requeue_min_run_s: float = 600.0  # never requeue a job that started less than this ago
    # a pending job whose begin time (--begin) is further ahead may not start now: no GPU is
    # planned or requeued for it yet (records.begins_later, _decide)
    begin_horizon_s: float = DEFAULT_BEGIN_HORIZON_S
    # How deep Slurm's passes look into the priority order (ClusterState.scheduler_depth; the
    # daemon reads it from `scontrol show config` at start, the simulator from its SlurmConfig).
    scheduler_depth: int = 0
    # Quiet cycles (with a QuietWatch): when no job was submitted, started, ended, requeued,
    # held or released (or began or stopped waiting on other than GPUs: records.waits_on_other,
    # or had its begin time moved) and no node changed since the last cycle that decided, and
    # no job decided around for its begin time came within begin_horizon_s since, a cycle less
    # than refresh_s after it decides nothing (0 = every cycle decides). Between such events
    # only the age credit and usage decay move the order; refresh_s bounds how stale that is
    # (docs/daemon.md: 600 s and 1,800 s gave the same Philly bench figures as 0).
    refresh_s: float = DEFAULT_REFRESH_S


# why a cycle sends nothing while the state store cannot be written (cycle._apply)
NOT_RECORDED = "the state store could not record it first (docs/daemon.md, Faults)"


@dataclass
class CycleResult:
    """What one cycle saw, decided and did."""

    decisions: list[Decision]
    applied: list[tuple[str, JobUpdate]]
    skipped: list[tuple[str, str]]
    errors: list[tuple[str, str]]
    started: float
    duration_s: float
    planned: list[tuple[str, JobUpdate]] = field(default_factory=list)
    pending_by_type: dict[str, int] = field(default_factory=dict)  # "" = unconstrained
    pending: int = 0
    running: int = 0
    pending_ids: frozenset[str] = frozenset()  # every pending job observed (managed partitions)
    # every job observed (managed partitions), running and completing ones too: what the daemon
    # set on them while they waited is still on them, and back in the queue after a requeue
    # (22.05 shows a requeued job as COMPLETING until its epilog ends). The list as observed:
    # the daemon's loop takes their ids, the simulator never needs them
    observed: Sequence[Job] = ()
    # jobs outside the managed partitions that still carry what the daemon set, which the
    # caller keeps as its own: pending ones whose put-back (_left_partitions) did not land this
    # cycle, and the others (running, say: a requeue puts them back in the queue, and the
    # put-back waits for that)
    left_ids: frozenset[str] = frozenset()
    unavailable: bool = False  # slurmctld went away while acting: the caller should back off
    # the state store could not record the updates first, so none was sent (_apply)
    not_recorded: bool = False
    # owned entries whose value from before an unknown outcome was dropped (settle_owned)
    settled: frozenset[str] = frozenset()
    requeued: list[str] = field(default_factory=list)  # running jobs requeued (rotation)
    # the requeues that passed the daemon's checks (job id, update set right after it): what a
    # dry run would do, and what a real cycle tried
    planned_requeues: list[tuple[str, JobUpdate | None]] = field(default_factory=list)
    quiet: bool = False  # nothing changed since the last deciding cycle: nothing was decided
    # wall seconds of each step (perf_counter, whatever the clock): observe, state (records and
    # the ledger), decide (the policy), plan (safe updates and requeues), act (sending them);
    # a quiet cycle has observe only. For metrics and profiling: nothing depends on them
    stages: dict[str, float] = field(default_factory=dict)
    # computes (inputs digest, job id -> digest of its inputs) when first asked for: the
    # daemon records them every cycle, the simulator never reads them
    digests_of: Callable[[], tuple[str, dict[str, str]]] | None = field(default=None, repr=False)
    _digests: tuple[str, dict[str, str]] | None = field(default=None, repr=False)

    def _computed(self) -> tuple[str, dict[str, str]]:
        if self._digests is None:
            self._digests = self.digests_of() if self.digests_of is not None else ("", {})
        return self._digests

    @property
    def inputs_digest(self) -> str:
        """Digest of the policy's inputs this cycle (state_digest)."""
        return self._computed()[0]

    @property
    def job_digests(self) -> dict[str, str]:
        """Job id -> digest of its inputs, for every planned update."""
        return self._computed()[1]


# ----------------------------------------------------------------------------- observe


def observe(backend: SlurmBackend, config: CycleConfig) -> tuple[list[Job], list[Node], list[Job]]:
    """Jobs in managed partitions, the nodes of those partitions, and the jobs outside them
    (a job moved out, or partitions the config no longer names)."""
    outside: list[Job] = []
    if config.partitions is None:
        jobs = list(backend.jobs())
    else:
        jobs = []
        for job in backend.jobs():
            (jobs if job_in_partitions(job, config.partitions) else outside).append(job)
    nodes = backend.nodes()
    if config.partitions is not None:
        wanted = set(config.partitions)
        nodes = [n for n in nodes if wanted.intersection(n.partitions)]
    return jobs, nodes, outside


def _put_back_due(outside: Sequence[Job], owned: Mapping[str, OwnedAttrs] | None) -> bool:
    """Whether a pending job outside the managed partitions carries what the daemon set (a
    quiet cycle would leave it there until the next deciding one)."""
    if not owned:
        return False
    return any(j.state is JobState.PENDING and j.job_id in owned
               and not reset_update(j, owned[j.job_id]).is_empty() for j in outside)


def _left_partitions(outside: Sequence[Job], owned: Mapping[str, OwnedAttrs] | None
                     ) -> tuple[list[tuple[str, JobUpdate]], list[Decision], set[str]]:
    """Put back what the daemon set (as `hase schedd reset` does) on pending jobs outside the
    managed partitions: their Nice would still order them, and their Features constrain them,
    where the daemon no longer looks. Other jobs outside them wait until they pend again.
    The set: pending ones with nothing of the daemon's left on them (the user set both since,
    or a put-back landed), which the daemon forgets."""
    updates: list[tuple[str, JobUpdate]] = []
    reasons: list[Decision] = []
    clean: set[str] = set()
    if not owned:
        return updates, reasons, clean
    for job in outside:
        mine = owned.get(job.job_id)
        if mine is None or job.state is not JobState.PENDING:
            continue
        update = reset_update(job, mine)
        if update.is_empty():
            clean.add(job.job_id)
        else:
            updates.append((job.job_id, update))
            reasons.append(Decision(job.job_id, reason=f"left the managed partitions (now in "
                                    f"{job.partition}): the daemon's Nice/Features put back"))
    return updates, reasons, clean


def _applies_pending_gres(backend: SlurmBackend) -> bool | None:
    """Whether this Slurm turns a pending job into an MPS share on a gres update (None: its
    release cannot be read now; asked again next cycle)."""
    try:
        return updates_pending_gres(backend.version())
    except SlurmError:
        return None


def _decide(policy: Policy, state: ClusterState,
            later: Mapping[str, float] | None = None) -> list[Decision]:
    """policy.decide. Jobs in `later` (their begin time is past the horizon: records.
    begins_later) may not start now: the policy decides for the others as if those were not
    there, so none takes a free GPU from a job that may start, nor has a running job requeued
    for it; their own Nice and constraint come from a second decide over every job (requeues
    from it dropped), ready when they may start. Any exception a policy raises comes out as a
    PolicyError naming it (before anything is planned or sent: the cycle does nothing)."""
    if not later:
        return _decide_once(policy, state)
    ready = [p for p in state.pending if p.job_id not in later]
    decisions = _decide_once(policy, replace(state, pending=ready))
    decisions += [d for d in _decide_once(policy, state) if d.job_id in later and not d.requeue]
    return decisions


def _decide_once(policy: Policy, state: ClusterState) -> list[Decision]:
    try:
        return policy.decide(state)
    except PolicyError:
        raise
    except Exception as exc:  # a policy bug on an odd state is not a Slurm fault
        raise PolicyError(f"policy {policy.name!r} failed on this cycle's state "
                          f"({len(state.pending)} pending, {len(state.running)} running jobs): "
                          f"{type(exc).__name__}: {exc}") from exc


# ----------------------------------------------------------------------------- act


def run_cycle(
    backend: SlurmBackend,
    policy: Policy,
    estimator: RuntimeEstimator,
    clock: Clock,
    ledger: UsageLedger,
    shares: Mapping[str, float],
    config: CycleConfig,
    *,
    owned: MutableMapping[str, OwnedAttrs] | None = None,
    watch: QuietWatch | None = None,
    intend: Callable[[Mapping[str, OwnedAttrs]], bool] | None = None,
) -> CycleResult:
    """Observe -> decide -> plan -> act, once.

    `owned` (job id -> what we last set) tells our Features/Nice from the user's; the daemon
    keeps it in the state store and it is updated here for every applied update. Without it,
    Features made only of known GPU types count as ours. SlurmUnavailableError from observing
    propagates (the caller backs off); while acting it stops the cycle with `unavailable=True`.
    Whatever the policy raises comes out as a PolicyError, before any update is planned.
    With `watch` and config.refresh_s > 0, a quiet cycle (CycleConfig.refresh_s) returns
    with `quiet=True` after observing. `intend` gets the `owned` entries of the updates about to
    be sent, before the first is (the daemon writes them to its store: a kill mid-act then
    leaves the store knowing what may be in Slurm).
    """
    started = clock.now()
    marks = [perf_counter()]  # after each step: CycleResult.stages
    jobs, nodes, outside = observe(backend, config)
    # (a clock stepped back since the last deciding cycle decides at once: quiet cycles are
    # bounded by refresh_s of the clock's own time, never by how far it went back)
    if (watch is not None and 0.0 <= started - watch.decided_at < config.refresh_s
            and started < watch.wake_at and nodes == watch.nodes and same_job_set(watch.jobs, jobs)
            and not _put_back_due(outside, owned)):
        # the same jobs run as when the watch was set: the ledger counts their service as a
        # deciding cycle would (a job that ends before the next observation keeps its share)
        ledger.observe(watch.running, started)
        return CycleResult(decisions=[], applied=[], skipped=[], errors=[], started=started,
                           duration_s=max(clock.now() - started, 0.0), quiet=True,
                           stages={"observe": perf_counter() - marks[0]})
    marks.append(perf_counter())
    settled = settle_owned(owned, [*jobs, *outside])
    cache = _cache_for(backend)
    if cache.pending_gres is None:
        cache.pending_gres = _applies_pending_gres(backend)
    # jobs are in managed partitions already (observe), so the summary covers all of them
    state, pending_jobs, by_type, later = _build_state(jobs, nodes, estimator, {}, shares,
                                                       started, config, cache)
    ledger.observe(state.running, started)
    state = replace(state, usage=ledger.usage(), scheduler_depth=config.scheduler_depth)
    marks.append(perf_counter())
    decisions = _decide(policy, state, later)
    marks.append(perf_counter())
    skipped: list[tuple[str, str]] = []
    capacity = cache.summary[1] if cache.summary is not None else None
    planned = plan_updates(decisions, jobs, nodes=nodes, owned=owned, skipped=skipped,
                           nice_min_delta=config.nice_min_delta, nice_limit=config.nice_limit,
                           nice_quantum=config.nice_quantum, nice_scale=config.nice_scale,
                           nice_zero=config.nice_zero, capacity=capacity, indexed=pending_jobs,
                           shares_ok=bool(cache.pending_gres))
    put_back, why, clean = _left_partitions(outside, owned)
    if put_back:
        planned += put_back
        decisions = [*decisions, *why]

    def digests() -> tuple[str, dict[str, str]]:
        by_id = {p.job_id: p for p in state.pending} if planned else {}
        return state_digest(state, cache), {jid: job_digest(by_id[jid], cache)
                                            for jid, _ in planned if jid in by_id}

    result = CycleResult(
        decisions=decisions, applied=[], skipped=skipped, errors=[], started=started,
        duration_s=0.0, planned=planned, pending_by_type=by_type, pending=len(state.pending),
        running=len(state.running), pending_ids=frozenset(pending_jobs),
        observed=jobs, digests_of=digests, settled=frozenset(settled),
    )
    requeues = plan_requeues(decisions, jobs, started, config, skipped, owned, capacity)
    result.planned_requeues = requeues
    marks.append(perf_counter())
    if not config.dry_run:
        result.not_recorded = not _apply(backend, planned, result, owned, config, intend)
        if requeues and result.not_recorded:
            skipped.extend((job_id, f"requeue not made: {NOT_RECORDED}") for job_id, _ in requeues)
        elif requeues and not result.unavailable:
            apply_requeues(backend, requeues, result, owned, intend,
                           {j.job_id: j for j in jobs if j.state is JobState.RUNNING})
    if owned and outside:
        landed = {job_id for job_id, _ in result.applied}
        result.left_ids = frozenset(j.job_id for j in outside if j.job_id in owned
                                    and j.job_id not in landed and j.job_id not in clean)
    if watch is not None:
        # a cycle that could not do all it planned is not a baseline: the next one decides
        done = not (result.unavailable or result.errors or result.not_recorded)
        watch.jobs, watch.nodes = (jobs, nodes) if done else (None, None)
        watch.decided_at, watch.running = started, state.running  # built this cycle
        watch.wake_at = min(later.values(), default=math.inf)
    marks.append(perf_counter())
    result.stages = dict(zip(STAGES, (b - a for a, b in pairwise(marks)), strict=True))
    result.duration_s = max(clock.now() - started, 0.0)
    return result


def _apply(backend: SlurmBackend, planned: Sequence[tuple[str, JobUpdate]], result: CycleResult,
           owned: MutableMapping[str, OwnedAttrs] | None, config: CycleConfig,
           intend: Callable[[Mapping[str, OwnedAttrs]], bool] | None) -> bool:
    """Send the updates. With `owned`, each is recorded as intended first (and handed to
    `intend`, which the daemon writes to its store before any scontrol call); an update that
    cannot have landed puts the entry back, one whose outcome is unknown keeps both values.
    When `intend` could not write (disk full), nothing is sent: after a restart the daemon
    would read its own values as a user's. False then."""
    before: dict[str, OwnedAttrs | None] = {}
    if owned is not None and planned:
        before = {job_id: record_intent(owned, job_id, upd) for job_id, upd in planned}
        if intend is not None and not intend({job_id: owned[job_id] for job_id in before}):
            for job_id, _ in planned:
                restore_owned(owned, job_id, before[job_id])
                result.skipped.append((job_id, f"not sent: {NOT_RECORDED}"))
            log.error("state store unwritable: %d updates not sent this cycle", len(planned))
            return False
    outcomes = apply_updates(backend, planned, workers=config.update_workers,
                             batch=config.batch_updates)
    for (job_id, update), (outcome, msg) in zip(planned, outcomes, strict=True):
        if outcome == "applied":
            result.applied.append((job_id, update))
            record_owned(owned, job_id, update)
        elif outcome in ("skipped", "unavailable-skip"):
            result.skipped.append((job_id, msg))
        else:
            result.errors.append((job_id, msg))
        if owned is not None and outcome not in ("applied", "unavailable"):
            restore_owned(owned, job_id, before.get(job_id))  # not sent, or refused
    if any(o == "unavailable" for o, _ in outcomes):
        result.unavailable = True
        log.warning("slurm unavailable while acting; %d updates not made",
                    sum(1 for o, _ in outcomes if o == "unavailable-skip"))
    return True
