"""One scheduling cycle: observe Slurm, build a ClusterState, decide, plan safe updates, act.

Everything comes in through arguments (backend, policy, estimator, clock, ledger, shares,
config): the daemon passes the real ones, the simulator passes its in-memory Slurm and a
simulated clock. Nothing here sleeps, reads config files or knows whether it is simulating.
All steps are O(jobs + nodes) apart from the policy itself.
"""

from __future__ import annotations

import hashlib
import logging
import operator
import weakref
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from slurm_hase.daemon.act import apply_updates
from slurm_hase.daemon.safety import Capacity, OwnedAttrs, lower_features, plan_updates
from slurm_hase.policy.types import ClusterState, Decision, GpuPool, PendingJob, Policy, RunningJob
from slurm_hase.policy.usage import UsageLedger
from slurm_hase.slurm.backend import SlurmBackend
from slurm_hase.slurm.types import Job, JobState, JobUpdate, Node

__all__ = [
    "Clock", "CycleConfig", "CycleResult", "JobEstimate", "OwnedAttrs", "RuntimeEstimator",
    "StateCache", "build_state", "job_in_partitions", "observe", "plan_updates", "run_cycle", "state_digest",
]

log = logging.getLogger("slurm_hase.daemon")

DEFAULT_RUNTIME_S = 3600.0  # expected remaining time of a running job we know nothing about


class Clock(Protocol):
    """Where `now` comes from (wall clock in the daemon, simulated time in the simulator)."""

    def now(self) -> float: ...


@dataclass(frozen=True)
class JobEstimate:
    """What the predictor says about one job."""

    runtime_s: Mapping[str, float]  # predicted exclusive runtime per GPU type
    mps_slowdown: Mapping[str, float] = field(default_factory=dict)
    memory_gb: float = 0.0


class RuntimeEstimator(Protocol):
    """Predicts a job's runtime per GPU type; None = unknown job, leave it alone."""

    def estimate(self, job: Job, gpu_types: Sequence[str]) -> JobEstimate | None: ...


@dataclass(frozen=True)
class CycleConfig:
    """Per-cycle settings."""

    partitions: tuple[str, ...] | None = None  # None = all
    dry_run: bool = False
    nice_min_delta: int = 1  # ignore Nice changes smaller than this (no update storms)
    nice_limit: int = 10_000  # clamp Nice to [-limit, limit]
    nice_quantum: int = 1  # round Nice to multiples (fewer distinct updates -> batched calls)
    # Multiply the policy's Nice so its order outweighs multifactor's other terms: about
    # (sum of PriorityWeight*) / 10, since policies step Nice by 10 per level.
    nice_scale: int = 1
    gpu_types: tuple[str, ...] | None = None  # manage only these GPU types (None = all seen)
    update_workers: int = 1  # concurrent scontrol updates (backend must be thread-safe if > 1)
    batch_updates: bool = False  # one update_job("1,2,3", u) per identical update (see act.py)


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
    inputs_digest: str = ""
    job_digests: dict[str, str] = field(default_factory=dict)  # job id -> digest of its inputs
    pending_by_type: dict[str, int] = field(default_factory=dict)  # "" = unconstrained
    pending: int = 0
    running: int = 0
    pending_ids: frozenset[str] = frozenset()  # every pending job observed (managed partitions)
    unavailable: bool = False  # slurmctld went away while acting: the caller should back off


# ----------------------------------------------------------------------------- observe


def job_in_partitions(job: Job, partitions: tuple[str, ...] | None) -> bool:
    """True when every partition the job may run in is managed (None = all managed)."""
    if partitions is None:
        return True
    parts = [p for p in job.partition.split(",") if p]
    return bool(parts) and all(p in partitions for p in parts)


def observe(backend: SlurmBackend, config: CycleConfig) -> tuple[list[Job], list[Node]]:
    """Jobs in managed partitions and the nodes of those partitions."""
    if config.partitions is None:
        jobs = list(backend.jobs())
    else:
        jobs = [j for j in backend.jobs() if job_in_partitions(j, config.partitions)]
    nodes = backend.nodes()
    if config.partitions is not None:
        wanted = set(config.partitions)
        nodes = [n for n in nodes if wanted.intersection(n.partitions)]
    return jobs, nodes


# ----------------------------------------------------------------------------- build state


class StateCache:
    """What one caller's cycles derived last time, reused while the inputs are unchanged.

    Per job: the PendingJob/RunningJob built from it (reused when the job's relevant fields,
    the estimate and the GPU types compare equal, so it works for backends that rebuild Job
    objects every time as well as for ones that keep them); per node list: the pools and the
    Capacity (reused while the very same Node objects come back); per built record: its digest
    text. Every cycle keeps only the entries it used, so the cache holds one cycle's jobs.
    """

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.summary: tuple[dict[str, GpuPool], Capacity] | None = None
        self.pending: dict[str, tuple[tuple[object, ...], JobEstimate, tuple[str, ...],
                                      PendingJob]] = {}
        self.running: dict[str, tuple[tuple[object, ...], JobEstimate | None, tuple[str, ...],
                                      float, RunningJob]] = {}
        self.texts: dict[str, tuple[object, str]] = {}  # job id -> (record, repr of its key)
        self.types: tuple[str, ...] = ()


_CACHES: weakref.WeakKeyDictionary[object, StateCache] = weakref.WeakKeyDictionary()


def _cache_for(backend: object) -> StateCache:
    """The StateCache of `backend` (a fresh one when the backend cannot be weakly keyed)."""
    try:
        cache = _CACHES.get(backend)
        if cache is None:
            cache = _CACHES[backend] = StateCache()
    except TypeError:
        return StateCache()
    return cache


def _summarize(nodes: Sequence[Node]) -> tuple[dict[str, GpuPool], Capacity]:
    """GPU pools and feature Capacity of usable nodes, in one pass."""
    acc: dict[str, list[int]] = {}  # type -> [total, free, nodes, max_per_node, mps_total]
    cap = Capacity()
    for node in nodes:
        if not node.usable:
            continue
        feats: frozenset[str] | None = None
        gpus = node.gpus
        for raw_type, count in gpus.items():
            gtype = raw_type.lower()
            if not gtype or count <= 0:
                continue
            free = max(count - node.gpus_alloc.get(raw_type, 0), 0)
            entry = acc.get(gtype)
            if entry is None:
                entry = acc[gtype] = [0, 0, 0, 0, 0]
            entry[0] += count
            entry[1] += free
            entry[2] += 1
            if count > entry[3]:
                entry[3] = count
            entry[4] += node.mps_total if len(gpus) == 1 else 0
            if feats is None:
                feats = lower_features(node.features)
            if gtype in feats:
                cap.add(node.partitions, gtype, count)
    pools = {}
    for gtype, (total, free, n_nodes, per_node, mps_total) in sorted(acc.items()):
        mps_cap = max(mps_total // total, 1) if mps_total else 100
        pools[gtype] = GpuPool(gtype, total, free, n_nodes, per_node, mps_cap)
    return pools, cap


def _node_summary(nodes: Sequence[Node], cache: StateCache | None
                  ) -> tuple[dict[str, GpuPool], Capacity]:
    if cache is None:
        return _summarize(nodes)
    prev = cache.nodes
    if (cache.summary is None or len(prev) != len(nodes)
            or not all(map(operator.is_, prev, nodes))):
        cache.summary = _summarize(nodes)
        cache.nodes = list(nodes)
    return cache.summary


def _pools(nodes: Sequence[Node]) -> dict[str, GpuPool]:
    return _summarize(nodes)[0]


def _gpu_shape(job: Job) -> tuple[int, float]:
    """(GPUs, fraction of each) a job asks for; an MPS-only request is one GPU's share."""
    req = job.gpu
    if req is None:
        return 0, 1.0
    if req.count <= 0 and req.mps > 0:
        return 1, min(req.mps, 100) / 100.0
    if req.mps > 0:
        return max(req.count, 1), min(req.mps, 100) / 100.0
    return req.count, 1.0


def _running_type(job: Job, pools: Mapping[str, GpuPool]) -> str:
    for raw, count in job.alloc_gpus.items():
        if count > 0 and raw.lower() in pools:
            return raw.lower()
    return next(iter(job.alloc_gpus), "").lower()


def build_state(
    jobs: Sequence[Job],
    nodes: Sequence[Node],
    estimator: RuntimeEstimator,
    ledger_usage: Mapping[str, float],
    shares: Mapping[str, float],
    now: float,
    config: CycleConfig,
    *,
    cache: StateCache | None = None,
) -> ClusterState:
    """The policy's view: GPU pools, estimated pending jobs, running jobs, usage, shares.

    With `cache` (the same object every cycle), records of unchanged jobs are reused; the
    estimator is still asked about every job, exactly as without it.
    """
    return _build_state(jobs, nodes, estimator, ledger_usage, shares, now, config, cache)[0]


def _build_state(
    jobs: Sequence[Job],
    nodes: Sequence[Node],
    estimator: RuntimeEstimator,
    ledger_usage: Mapping[str, float],
    shares: Mapping[str, float],
    now: float,
    config: CycleConfig,
    cache: StateCache | None,
) -> tuple[ClusterState, frozenset[str], dict[str, int]]:
    """build_state, and (as _pending_summary of the jobs in managed partitions) in the same pass
    the ids of pending jobs and their count by asked type."""
    all_pools, _ = _node_summary(nodes, cache)
    if config.gpu_types is not None:
        pools = {t: p for t, p in all_pools.items() if t in config.gpu_types}
    else:
        pools = dict(all_pools)
    types = tuple(pools)
    if cache is not None:
        if cache.types == types:
            types = cache.types  # the same object cycle after cycle: identity checks hit
        else:
            cache.types = types
    pending: list[PendingJob] = []
    running: list[RunningJob] = []
    old_p = cache.pending if cache is not None else {}
    old_r = cache.running if cache is not None else {}
    new_p: dict[str, tuple[tuple[object, ...], JobEstimate, tuple[str, ...], PendingJob]] = {}
    new_r: dict[str, tuple[tuple[object, ...], JobEstimate | None, tuple[str, ...], float,
                           RunningJob]] = {}
    pending_ids: list[str] = []
    by_type: dict[str, int] = {}
    partitions = config.partitions
    pending_state, running_state = JobState.PENDING, JobState.RUNNING
    estimate = estimator.estimate
    for job in jobs:
        if partitions is not None and not job_in_partitions(job, partitions):
            continue
        state = job.state
        if state is pending_state:
            pending_ids.append(job.job_id)
            gpu = job.gpu
            if gpu is not None:
                tkey = (gpu.gpu_type or job.features or "").lower()
                by_type[tkey] = by_type.get(tkey, 0) + 1
            if job.held or gpu is None:
                continue
            sub = job.submit_time
            key = (job.account, job.user, sub, now if sub is None else None, gpu, job.nice,
                   job.features)
            pe = old_p.get(job.job_id)
            if pe is not None and pe[0] == key:
                est = estimate(job, types)  # the same gpu asked before: num > 0
                if est is None:
                    continue
                if (est is pe[1] or est == pe[1]) and (pe[2] is types or pe[2] == types):
                    pending.append(pe[3])
                    new_p[job.job_id] = (key, est, types, pe[3])  # newest objects: `is` hits
                    continue
                num, frac = _gpu_shape(job)
            else:
                num, frac = _gpu_shape(job)
                if num <= 0:
                    continue
                est = estimate(job, types)
                if est is None:
                    continue
            runtimes = {t: float(r) for t, r in est.runtime_s.items() if t in pools and r > 0}
            if not runtimes:
                continue
            pinned = gpu.gpu_type.lower() if gpu.gpu_type else None
            pj = PendingJob(
                job_id=job.job_id, account=job.account, user=job.user,
                submit_time=float(sub if sub is not None else now),
                num_gpus=num, runtime_s=runtimes, gpu_fraction=frac,
                mps_slowdown=dict(est.mps_slowdown), pinned_type=pinned, nice=job.nice,
                features=job.features, memory_gb=est.memory_gb,
            )
            pending.append(pj)
            new_p[job.job_id] = (key, est, types, pj)
        elif state is running_state and job.alloc_gpus:
            est_r = estimate(job, types) if pools else None
            start_t = job.start_time
            rkey = (job.account, job.user, start_t, now if start_t is None else None,
                    job.time_limit_s, job.gpu, job.alloc_gpus)
            re_ = old_r.get(job.job_id)
            if (re_ is not None and re_[0] == rkey and re_[2] == types
                    and (est_r is re_[1] or est_r == re_[1])):
                expected, rj = re_[3], re_[4]
                end = max(expected, now)
                if rj.expected_end != end:
                    rj = replace(rj, expected_end=end)
                re_ = (rkey, est_r, types, expected, rj)
            else:
                expected, rj = _running_est(job, pools, est_r, now)
                re_ = (rkey, est_r, types, expected, rj)
            running.append(rj)
            new_r[job.job_id] = re_
    if cache is not None:
        cache.pending, cache.running = new_p, new_r
    state_out = ClusterState(now=now, pools=pools, pending=pending, running=running,
                             shares=dict(shares), usage=dict(ledger_usage))
    return state_out, frozenset(pending_ids), by_type


def _running(job: Job, pools: Mapping[str, GpuPool], estimator: RuntimeEstimator,
             now: float) -> RunningJob:
    est = estimator.estimate(job, tuple(pools)) if pools else None
    return _running_est(job, pools, est, now)[1]


def _running_est(job: Job, pools: Mapping[str, GpuPool], est: JobEstimate | None,
                 now: float) -> tuple[float, RunningJob]:
    """(expected end before clamping to now, the RunningJob)."""
    gtype = _running_type(job, pools)
    num = sum(c for c in job.alloc_gpus.values() if c > 0)
    _, frac = _gpu_shape(job)
    start = float(job.start_time if job.start_time is not None else now)
    speed = 1.0
    expected = start + DEFAULT_RUNTIME_S
    if est is not None and est.runtime_s.get(gtype, 0.0) > 0:
        here = est.runtime_s[gtype]
        best = min((r for r in est.runtime_s.values() if r > 0), default=here)
        speed = min(max(best / here, 1e-6), 1.0)
        expected = start + here
    elif job.time_limit_s:
        expected = start + job.time_limit_s
    if job.time_limit_s:
        expected = min(expected, start + job.time_limit_s)
    return expected, RunningJob(
        job_id=job.job_id, account=job.account, user=job.user, gpu_type=gtype,
        num_gpus=max(num, 1), start_time=start, expected_end=max(expected, now),
        gpu_fraction=frac, relative_speed=speed)


def state_digest(state: ClusterState, cache: StateCache | None = None) -> str:
    """A short stable digest of a policy's inputs (recorded with every cycle).

    The sha1 of repr((now, pools, shares, usage, pending keys, running keys)); with `cache`
    the repr of each job's key is kept between cycles, so only the join and the hash are O(n).
    """
    old = cache.texts if cache is not None else {}
    new: dict[str, tuple[object, str]] = {}
    pend = []
    for p in state.pending:
        e = old.get(p.job_id)
        if e is None or e[0] is not p:
            e = (p, repr(_pending_key(p)))
        new[p.job_id] = e
        pend.append(e[1])
    run = []
    for r in state.running:
        e = old.get(r.job_id)
        if e is None or e[0] is not r:
            e = (r, repr((r.job_id, r.gpu_type, r.num_gpus, r.gpu_fraction, r.start_time,
                          r.expected_end, r.relative_speed)))
        new[r.job_id] = e
        run.append(e[1])
    if cache is not None:
        cache.texts = new
    # exactly repr() of the 6-tuple (lists of reprs joined as repr(list) does)
    text = "".join((
        "(", repr(state.now), ", ", repr(sorted(state.pools.items())), ", ",
        repr(sorted(state.shares.items())), ", ", repr(sorted(state.usage.items())), ", [",
        ", ".join(pend), "], [", ", ".join(run), "])"))
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:16]


def _pending_key(p: PendingJob) -> tuple[object, ...]:
    return (p.job_id, p.account, p.user, p.submit_time, p.num_gpus, tuple(p.runtime_s.items()),
            p.gpu_fraction, tuple(p.mps_slowdown.items()), p.pinned_type, p.nice, p.features,
            p.memory_gb)


def job_digest(p: PendingJob, cache: StateCache | None = None) -> str:
    """Digest of one pending job's policy inputs."""
    e = cache.texts.get(p.job_id) if cache is not None else None
    text = e[1] if e is not None and e[0] is p else repr(_pending_key(p))
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:16]


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
) -> CycleResult:
    """Observe -> decide -> plan -> act, once.

    `owned` (job id -> what we last set) tells our Features/Nice from the user's; the daemon
    keeps it in the state store and it is updated here for every applied update. Without it,
    Features made only of known GPU types count as ours. SlurmUnavailableError from observing
    propagates (the caller backs off); while acting it stops the cycle with `unavailable=True`.
    """
    started = clock.now()
    jobs, nodes = observe(backend, config)
    cache = _cache_for(backend)
    # jobs are in managed partitions already (observe), so the summary covers all of them
    state, pending_ids, by_type = _build_state(jobs, nodes, estimator, {}, shares, started,
                                               config, cache)
    ledger.observe(state.running, started)
    state = replace(state, usage=ledger.usage())
    decisions = policy.decide(state)
    skipped: list[tuple[str, str]] = []
    capacity = cache.summary[1] if cache.summary is not None else None
    planned = plan_updates(decisions, jobs, nodes=nodes, owned=owned, skipped=skipped,
                           nice_min_delta=config.nice_min_delta, nice_limit=config.nice_limit,
                           nice_quantum=config.nice_quantum, nice_scale=config.nice_scale,
                           capacity=capacity)
    by_id = {p.job_id: p for p in state.pending} if planned else {}
    result = CycleResult(
        decisions=decisions, applied=[], skipped=skipped, errors=[], started=started,
        duration_s=0.0, planned=planned, inputs_digest=state_digest(state, cache),
        job_digests={jid: job_digest(by_id[jid], cache) for jid, _ in planned if jid in by_id},
        pending_by_type=by_type, pending=len(state.pending),
        running=len(state.running),
        pending_ids=pending_ids,
    )
    if not config.dry_run:
        _apply(backend, planned, result, owned, config)
    result.duration_s = max(clock.now() - started, 0.0)
    return result


def _apply(backend: SlurmBackend, planned: Sequence[tuple[str, JobUpdate]], result: CycleResult,
           owned: MutableMapping[str, OwnedAttrs] | None, config: CycleConfig) -> None:
    outcomes = apply_updates(backend, planned, workers=config.update_workers,
                             batch=config.batch_updates)
    for (job_id, update), (outcome, msg) in zip(planned, outcomes, strict=True):
        if outcome == "applied":
            result.applied.append((job_id, update))
            if owned is not None:
                prev = owned.get(job_id, OwnedAttrs())
                owned[job_id] = OwnedAttrs(
                    nice=update.nice if update.nice is not None else prev.nice,
                    features=update.features if update.features is not None else prev.features)
        elif outcome in ("skipped", "unavailable-skip"):
            result.skipped.append((job_id, msg))
        else:
            result.errors.append((job_id, msg))
    if any(o == "unavailable" for o, _ in outcomes):
        result.unavailable = True
        log.warning("slurm unavailable while acting; %d updates not made",
                    sum(1 for o, _ in outcomes if o == "unavailable-skip"))


def _pending_by_type(jobs: Sequence[Job]) -> dict[str, int]:
    return _pending_summary(jobs)[1]


def _pending_summary(jobs: Sequence[Job]) -> tuple[frozenset[str], dict[str, int]]:
    """Ids of pending jobs, and their count by asked GPU type/constraint ("" = neither)."""
    ids = []
    out: dict[str, int] = {}
    pending = JobState.PENDING
    for job in jobs:
        if job.state is pending:
            ids.append(job.job_id)
            gpu = job.gpu
            if gpu is not None:
                key = (gpu.gpu_type or job.features or "").lower()
                out[key] = out.get(key, 0) + 1
    return frozenset(ids), out
