"""One scheduling cycle: observe Slurm, build a ClusterState, decide, plan safe updates, act.

Everything comes in through arguments (backend, policy, estimator, clock, ledger, shares,
config): the daemon passes the real ones, the simulator passes its in-memory Slurm and a
simulated clock. Nothing here sleeps, reads config files or knows whether it is simulating.
All steps are O(jobs + nodes) apart from the policy itself.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from slurm_hase.daemon.act import apply_updates
from slurm_hase.daemon.safety import OwnedAttrs, plan_updates
from slurm_hase.policy.types import ClusterState, Decision, GpuPool, PendingJob, Policy, RunningJob
from slurm_hase.policy.usage import UsageLedger
from slurm_hase.slurm.backend import SlurmBackend
from slurm_hase.slurm.types import Job, JobState, JobUpdate, Node

__all__ = [
    "Clock", "CycleConfig", "CycleResult", "JobEstimate", "OwnedAttrs", "RuntimeEstimator",
    "build_state", "job_in_partitions", "observe", "plan_updates", "run_cycle", "state_digest",
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
    jobs = [j for j in backend.jobs() if job_in_partitions(j, config.partitions)]
    nodes = backend.nodes()
    if config.partitions is not None:
        wanted = set(config.partitions)
        nodes = [n for n in nodes if wanted.intersection(n.partitions)]
    return jobs, nodes


# ----------------------------------------------------------------------------- build state


def _pools(nodes: Sequence[Node]) -> dict[str, GpuPool]:
    acc: dict[str, list[int]] = {}  # type -> [total, free, nodes, max_per_node, mps_total]
    for node in nodes:
        if not node.usable:
            continue
        for raw_type, count in node.gpus.items():
            gtype = raw_type.lower()
            if not gtype or count <= 0:
                continue
            free = max(count - node.gpus_alloc.get(raw_type, 0), 0)
            entry = acc.setdefault(gtype, [0, 0, 0, 0, 0])
            entry[0] += count
            entry[1] += free
            entry[2] += 1
            entry[3] = max(entry[3], count)
            entry[4] += node.mps_total if len(node.gpus) == 1 else 0
    pools = {}
    for gtype, (total, free, n_nodes, per_node, mps_total) in sorted(acc.items()):
        mps_cap = max(mps_total // total, 1) if mps_total else 100
        pools[gtype] = GpuPool(gtype, total, free, n_nodes, per_node, mps_cap)
    return pools


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
) -> ClusterState:
    """The policy's view: GPU pools, estimated pending jobs, running jobs, usage, shares."""
    pools = _pools(nodes)
    if config.gpu_types is not None:
        pools = {t: p for t, p in pools.items() if t in config.gpu_types}
    types = tuple(pools)
    pending: list[PendingJob] = []
    running: list[RunningJob] = []
    for job in jobs:
        if not job_in_partitions(job, config.partitions):
            continue
        if job.state is JobState.PENDING:
            if job.held or job.gpu is None:
                continue
            num, frac = _gpu_shape(job)
            if num <= 0:
                continue
            est = estimator.estimate(job, types)
            if est is None:
                continue
            runtimes = {t: float(r) for t, r in est.runtime_s.items() if t in pools and r > 0}
            if not runtimes:
                continue
            pinned = job.gpu.gpu_type.lower() if job.gpu.gpu_type else None
            pending.append(PendingJob(
                job_id=job.job_id, account=job.account, user=job.user,
                submit_time=float(job.submit_time if job.submit_time is not None else now),
                num_gpus=num, runtime_s=runtimes, gpu_fraction=frac,
                mps_slowdown=dict(est.mps_slowdown), pinned_type=pinned, nice=job.nice,
                features=job.features, memory_gb=est.memory_gb,
            ))
        elif job.state is JobState.RUNNING and job.alloc_gpus:
            running.append(_running(job, pools, estimator, now))
    return ClusterState(now=now, pools=pools, pending=pending, running=running,
                        shares=dict(shares), usage=dict(ledger_usage))


def _running(job: Job, pools: Mapping[str, GpuPool], estimator: RuntimeEstimator,
             now: float) -> RunningJob:
    gtype = _running_type(job, pools)
    num = sum(c for c in job.alloc_gpus.values() if c > 0)
    _, frac = _gpu_shape(job)
    start = float(job.start_time if job.start_time is not None else now)
    speed = 1.0
    expected = start + DEFAULT_RUNTIME_S
    est = estimator.estimate(job, tuple(pools)) if pools else None
    if est is not None and est.runtime_s.get(gtype, 0.0) > 0:
        here = est.runtime_s[gtype]
        best = min((r for r in est.runtime_s.values() if r > 0), default=here)
        speed = min(max(best / here, 1e-6), 1.0)
        expected = start + here
    elif job.time_limit_s:
        expected = start + job.time_limit_s
    if job.time_limit_s:
        expected = min(expected, start + job.time_limit_s)
    return RunningJob(job_id=job.job_id, account=job.account, user=job.user, gpu_type=gtype,
                      num_gpus=max(num, 1), start_time=start, expected_end=max(expected, now),
                      gpu_fraction=frac, relative_speed=speed)


def state_digest(state: ClusterState) -> str:
    """A short stable digest of a policy's inputs (recorded with every cycle)."""
    payload = (state.now, sorted(state.pools.items()), sorted(state.shares.items()),
               sorted(state.usage.items()), [_pending_key(p) for p in state.pending],
               [(r.job_id, r.gpu_type, r.num_gpus, r.gpu_fraction, r.start_time, r.expected_end,
                 r.relative_speed) for r in state.running])
    return hashlib.sha1(repr(payload).encode(), usedforsecurity=False).hexdigest()[:16]


def _pending_key(p: PendingJob) -> tuple[object, ...]:
    return (p.job_id, p.account, p.user, p.submit_time, p.num_gpus, tuple(p.runtime_s.items()),
            p.gpu_fraction, tuple(p.mps_slowdown.items()), p.pinned_type, p.nice, p.features,
            p.memory_gb)


def job_digest(p: PendingJob) -> str:
    """Digest of one pending job's policy inputs."""
    return hashlib.sha1(repr(_pending_key(p)).encode(), usedforsecurity=False).hexdigest()[:16]


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
    state = build_state(jobs, nodes, estimator, {}, shares, started, config)
    ledger.observe(state.running, started)
    state = replace(state, usage=ledger.usage())
    decisions = policy.decide(state)
    skipped: list[tuple[str, str]] = []
    planned = plan_updates(decisions, jobs, nodes=nodes, owned=owned, skipped=skipped,
                           nice_min_delta=config.nice_min_delta, nice_limit=config.nice_limit,
                           nice_quantum=config.nice_quantum, nice_scale=config.nice_scale)
    by_id = {p.job_id: p for p in state.pending}
    result = CycleResult(
        decisions=decisions, applied=[], skipped=skipped, errors=[], started=started,
        duration_s=0.0, planned=planned, inputs_digest=state_digest(state),
        job_digests={jid: job_digest(by_id[jid]) for jid, _ in planned if jid in by_id},
        pending_by_type=_pending_by_type(jobs), pending=len(state.pending),
        running=len(state.running),
        pending_ids=frozenset(j.job_id for j in jobs if j.state is JobState.PENDING),
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
    out: dict[str, int] = {}
    for job in jobs:
        if job.state is JobState.PENDING and job.gpu is not None:
            key = (job.gpu.gpu_type or job.features or "").lower()
            out[key] = out.get(key, 0) + 1
    return out
