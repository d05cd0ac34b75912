"""The policy's view of the cluster: GPU pools, estimated pending and running jobs.

build_state turns what the backend reports (jobs, nodes) plus the estimator's predictions into
a ClusterState; a StateCache (one per backend) reuses the records of unchanged jobs between
cycles (digest.py digests the inputs). All steps are O(jobs + nodes).
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

from slurm_hase.daemon.safety import Capacity, lower_features
from slurm_hase.policy.types import ClusterState, GpuPool, PendingJob, RunningJob
from slurm_hase.slurm.types import Job, JobState, Node

if TYPE_CHECKING:
    from slurm_hase.daemon.cycle import CycleConfig

DEFAULT_RUNTIME_S = 3600.0  # expected remaining time of a running job we know nothing about


@dataclass(frozen=True)
class JobEstimate:
    """What the predictor says about one job."""

    runtime_s: Mapping[str, float]  # predicted exclusive runtime per GPU type
    mps_slowdown: Mapping[str, float] = field(default_factory=dict)
    memory_gb: float = 0.0
    checkpoint: bool = False  # the job opted in to checkpoint + requeue


class RuntimeEstimator(Protocol):
    """Predicts a job's runtime per GPU type; None = unknown job, leave it alone.

    An estimator whose answer for the very same Job object and GPU types never changes may say
    so with a class attribute `repeatable = True`: build_state then reuses the last answer for a
    Job object a backend hands back unchanged (SimSlurm does) instead of asking again.
    """

    def estimate(self, job: Job, gpu_types: Sequence[str]) -> JobEstimate | None: ...


def _repeatable(estimator: RuntimeEstimator) -> bool:
    return getattr(estimator, "repeatable", False) is True


def job_in_partitions(job: Job, partitions: tuple[str, ...] | None) -> bool:
    """True when every partition the job may run in is managed (None = all managed)."""
    if partitions is None:
        return True
    parts = [p for p in job.partition.split(",") if p]
    return bool(parts) and all(p in partitions for p in parts)


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
                                      PendingJob, Job, str]] = {}
        self.running: dict[str, tuple[tuple[object, ...], JobEstimate | None, tuple[str, ...],
                                      float, RunningJob, Job]] = {}
        self.texts: dict[str, tuple[object, str]] = {}  # job id -> (record, repr of its key)
        self.types: tuple[str, ...] = ()
        self.node_parts: dict[str, tuple[Node, NodePart]] = {}  # node name -> (node, its part)
        self.cap_parts: list[CapPart | None] = []  # what the Capacity was built of


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


CapPart = tuple[tuple[str, ...], tuple[tuple[str, int], ...]]  # partitions, (type, GPUs)
NodePart = tuple[tuple[tuple[str, int, int, int], ...], CapPart | None]


def _node_part(node: Node) -> NodePart:
    """What one node adds: (type, GPUs, free, MPS total) per GPU type when usable, and what
    Capacity counts of it (partitions, (type, GPUs) with the type in Features; None: nothing)."""
    if not node.usable:
        return (), None
    entries = []
    cap: list[tuple[str, int]] = []
    feats: frozenset[str] | None = None
    gpus = node.gpus
    for raw_type, count in gpus.items():
        gtype = raw_type.lower()
        if not gtype or count <= 0:
            continue
        free = max(count - node.gpus_alloc.get(raw_type, 0), 0)
        entries.append((gtype, count, free, node.mps_total if len(gpus) == 1 else 0))
        if feats is None:
            feats = lower_features(node.features)
        if gtype in feats:
            cap.append((gtype, count))
    return tuple(entries), ((node.partitions, tuple(cap)) if cap else None)


def _summarize(nodes: Sequence[Node], cache: StateCache | None = None
               ) -> tuple[dict[str, GpuPool], Capacity]:
    """GPU pools and feature Capacity of usable nodes, in one pass. With `cache`, a node
    object seen last time is not read again, and the Capacity stands while no node's part
    of it changed (allocations do not change it)."""
    acc: dict[str, list[int]] = {}  # type -> [total, free, nodes, max_per_node, mps_total]
    old = cache.node_parts if cache is not None else {}
    parts: dict[str, tuple[Node, NodePart]] = {}
    cap_parts: list[CapPart | None] = []
    for node in nodes:
        hit = old.get(node.name)
        part = hit[1] if hit is not None and hit[0] is node else _node_part(node)
        parts[node.name] = (node, part)
        for gtype, count, free, mps in part[0]:
            entry = acc.get(gtype)
            if entry is None:
                entry = acc[gtype] = [0, 0, 0, 0, 0]
            entry[0] += count
            entry[1] += free
            entry[2] += 1
            if count > entry[3]:
                entry[3] = count
            entry[4] += mps
        cap_parts.append(part[1])
    if cache is not None and cache.summary is not None and cache.cap_parts == cap_parts:
        cap = cache.summary[1]
    else:
        cap = Capacity()
        for cp in cap_parts:
            if cp is not None:
                node_partitions, counts = cp
                for gtype, count in counts:
                    cap.add(node_partitions, gtype, count)
    if cache is not None:
        cache.node_parts, cache.cap_parts = parts, cap_parts
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
        cache.summary = _summarize(nodes, cache)
        cache.nodes = list(nodes)
    return cache.summary


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
    """build_state, and in the same pass the ids of the pending jobs in managed partitions and
    their count by asked GPU type or constraint ("" = neither)."""
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
    new_p: dict[str, tuple[tuple[object, ...], JobEstimate, tuple[str, ...], PendingJob,
                           Job, str]] = {}
    new_r: dict[str, tuple[tuple[object, ...], JobEstimate | None, tuple[str, ...], float,
                           RunningJob, Job]] = {}
    pending_ids: list[str] = []
    by_type: dict[str, int] = {}
    partitions = config.partitions
    pending_state, running_state = JobState.PENDING, JobState.RUNNING
    estimate = estimator.estimate
    # the very same Job object as last cycle, the same types and an estimator that would answer
    # the same: its last estimate is reused instead of asking again
    reuse = _repeatable(estimator)
    # policies see Nice in their own units: Slurm's / nice_scale + nice_zero
    scale, zero = max(config.nice_scale, 1), config.nice_zero
    for job in jobs:
        if partitions is not None and not job_in_partitions(job, partitions):
            continue
        state = job.state
        if state is pending_state:
            pending_ids.append(job.job_id)
            pe = old_p.get(job.job_id)
            if (reuse and pe is not None and pe[4] is job and pe[2] is types
                    and job.submit_time is not None):
                # the very same (immutable) Job as last cycle, the same types and a repeatable
                # estimator: last cycle's entry (asked GPUs, not held, its record) stands as it is
                tkey = pe[5]
                by_type[tkey] = by_type.get(tkey, 0) + 1
                pending.append(pe[3])
                new_p[job.job_id] = pe
                continue
            sub = job.submit_time
            # the backend handed back the very same (immutable) Job as last cycle
            same = pe if pe is not None and pe[4] is job and sub is not None else None
            gpu = job.gpu
            if gpu is None:
                continue
            tkey = same[5] if same is not None else (gpu.gpu_type or job.features or "").lower()
            by_type[tkey] = by_type.get(tkey, 0) + 1
            if job.held:
                continue
            if same is not None:
                key = same[0]
            else:
                key = (job.account, job.user, sub, now if sub is None else None, gpu, job.nice,
                       job.features, job.requeue)
            same_key = pe is not None and pe[0] == key
            if pe is not None and (same_key or _only_nice_or_features(pe[0], key)):
                # the same gpu asked before (num > 0); at most the daemon's own Nice/Features
                # update differs, and then the record is the same but for those
                est = estimate(job, types)  # (a repeatable answer was taken above)
                if est is None:
                    continue
                if (est is pe[1] or est == pe[1]) and (pe[2] is types or pe[2] == types):
                    pj = pe[3] if same_key else replace(
                        pe[3], features=job.features,
                        nice=(job.nice if scale == 1 else round(job.nice / scale)) + zero)
                    pending.append(pj)
                    new_p[job.job_id] = (key, est, types, pj, job, tkey)  # newest: `is` hits
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
                mps_slowdown=dict(est.mps_slowdown), pinned_type=pinned,
                nice=(job.nice if scale == 1 else round(job.nice / scale)) + zero,
                features=job.features, memory_gb=est.memory_gb,
                preemptible=bool(est.checkpoint and job.requeue),
            )
            pending.append(pj)
            new_p[job.job_id] = (key, est, types, pj, job, tkey)
        elif state is running_state and job.alloc_gpus:
            re_ = old_r.get(job.job_id)
            if (reuse and re_ is not None and re_[5] is job and re_[2] is types
                    and job.start_time is not None):  # the same Job as last cycle (as above)
                rj = re_[4]
                end = max(re_[3], now)
                if rj.expected_end != end:
                    rj = replace(rj, expected_end=end)
                    re_ = (re_[0], re_[1], types, re_[3], rj, job)
                running.append(rj)
                new_r[job.job_id] = re_
                continue
            start_t = job.start_time
            # the very same Job as last cycle
            same_r = re_ if re_ is not None and re_[5] is job and start_t is not None else None
            est_r = estimate(job, types) if pools else None  # (a repeatable one: above)
            if same_r is not None:
                rkey = same_r[0]
            else:
                rkey = (job.account, job.user, start_t, now if start_t is None else None,
                        job.time_limit_s, job.gpu, job.alloc_gpus, job.requeue, job.restarts)
            if (re_ is not None and re_[0] == rkey and re_[2] == types
                    and (est_r is re_[1] or est_r == re_[1])):
                expected, rj = re_[3], re_[4]
                end = max(expected, now)
                if rj.expected_end != end:
                    rj = replace(rj, expected_end=end)
                re_ = (rkey, est_r, types, expected, rj, job)
            else:
                expected, rj = _running_est(job, pools, est_r, now)
                re_ = (rkey, est_r, types, expected, rj, job)
            running.append(rj)
            new_r[job.job_id] = re_
    if cache is not None:
        cache.pending, cache.running = new_p, new_r
    state_out = ClusterState(now=now, pools=pools, pending=pending, running=running,
                             shares=dict(shares), usage=dict(ledger_usage))
    return state_out, frozenset(pending_ids), by_type


def _only_nice_or_features(before: tuple[object, ...], now: tuple[object, ...]) -> bool:
    """Whether two pending-job keys (account, user, submit, now, GPU request, nice, features,
    requeue) differ at most in nice and features."""
    return before[:5] == now[:5] and before[7] == now[7]


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
        gpu_fraction=frac, relative_speed=speed,
        preemptible=bool(est is not None and est.checkpoint and job.requeue),
        restarts=job.restarts,
        runtime_s={} if est is None else {t: r for t, r in est.runtime_s.items()
                                          if t in pools and r > 0})
