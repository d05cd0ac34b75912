"""One job's record for the policy: a PendingJob or RunningJob from a Job and its estimate.

build_state (state.py) calls a RecordBuilder for every job it cannot reuse as it is; the
builder reuses what it can of the job's previous entry (the same key, or only the daemon's own
Nice/Features changed) and asks the estimator only then.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Protocol

from slurm_hase.policy.types import GpuPool, PendingJob, RunningJob
from slurm_hase.slurm import hostlist
from slurm_hase.slurm.tres import (
    asks_shards,
    convertible_to_share,
    node_shards_per_gpu,
    requested_shards,
)
from slurm_hase.slurm.types import GpuRequest, Job, Node

DEFAULT_RUNTIME_S = 3600.0  # expected remaining time of a running job we know nothing about
# MPS units of one GPU where no node says otherwise: gres/mps read as a percent of a GPU
MPS_PER_GPU = 100
# Pending reasons under which a job cannot start however many GPUs free up (Slurm's "Job
# Reason Codes"): it waits for another job, its array's task limit, or a limit of its
# association or QOS. Such a job gets no record, as a held one: it asks no GPU now, so it takes
# no free GPU in the policy's plan, counts in no account's demand, and no running job is
# requeued for it. Not the reason BeginTime: Slurm shows a job it requeued moments ago so, and
# an admin's `scontrol update StartTime=now` starts one at once. A job's begin time counts
# instead (begins_later): such a job keeps its record, but the cycle decides around it.
_WAITS_ON_OTHER = frozenset({"Dependency", "DependencyNeverSatisfied", "JobArrayTaskLimit"})
_LIMIT_PREFIXES = ("AssocGrp", "AssocMax", "Association", "QOSGrp", "QOSMax", "QOSJobLimit",
                   "QOSResourceLimit", "QOSTimeLimit", "QOSUsageThreshold")


@lru_cache(maxsize=256)
def waits_on_other(reason: str) -> bool:
    """Whether a pending job with this reason waits on something other than GPUs (above)."""
    return reason in _WAITS_ON_OTHER or reason.startswith(_LIMIT_PREFIXES)


# How far ahead a pending job's begin time (Slurm's EligibleTime) may be for the job to count
# as one that may start now (CycleConfig.begin_horizon_s). Past Slurm's hold of a job it
# requeued (22.05: EligibleTime = the requeue + cred_expire + 1 s, 121 s by default), so a requeued
# job is planned for as any other.
DEFAULT_BEGIN_HORIZON_S = 300.0


def begins_later(job: Job, now: float, horizon_s: float) -> float | None:
    """When a pending job that may not start before now + horizon_s (its --begin) comes within
    the horizon; None for a job that may start sooner. Until then the cycle plans no GPU and no
    requeue for it (cycle._decide)."""
    eligible = job.eligible_time
    return None if eligible is None or eligible <= now + horizon_s else eligible - horizon_s


@dataclass(frozen=True)
class JobEstimate:
    """What the predictor says about one job."""

    runtime_s: Mapping[str, float]  # predicted exclusive runtime per GPU type
    mps_slowdown: Mapping[str, float] = field(default_factory=dict)
    memory_gb: float = 0.0
    checkpoint: bool = False  # the job opted in to checkpoint + requeue
    may_share: bool = False  # the job opted in to sharing a GPU through MPS (share=yes)


class RuntimeEstimator(Protocol):
    """Predicts a job's runtime per GPU type; None = unknown job, leave it alone.

    An estimator whose answer for the very same Job object and GPU types never changes, and
    does not depend on what Slurm moves while a job waits (its priority, pending reason and
    projected start and end), may say so with a class attribute `repeatable = True`:
    build_state then reuses the last answer for a Job object a backend hands back unchanged
    (SimSlurm does), or for a pending one equal to it but for those fields (squeue's, every
    cycle), instead of asking again.
    """

    def estimate(self, job: Job, gpu_types: Sequence[str]) -> JobEstimate | None: ...


# (key, estimate, GPU types the job may use, record, the Job it was built from, asked type or
# constraint)
PendingEntry = tuple[tuple[object, ...], JobEstimate, tuple[str, ...], PendingJob, Job, str]
# (key, estimate, GPU types, expected end before clamping, record, the Job it was built from)
RunningEntry = tuple[tuple[object, ...], JobEstimate | None, tuple[str, ...], float, RunningJob,
                     Job]


class RecordBuilder:
    """Builds (or reuses from last cycle's entries) the records of one cycle's jobs."""

    def __init__(self, pools: Mapping[str, GpuPool], types: tuple[str, ...],
                 estimator: RuntimeEstimator, now: float, nice_scale: int, nice_zero: int,
                 reuse: bool, old_pending: Mapping[str, PendingEntry],
                 old_running: Mapping[str, RunningEntry],
                 mps_units: Mapping[str, int] | None = None, requeue: bool = True,
                 nodes: Sequence[Node] = (), share: bool = False) -> None:
        self.pools, self.types, self.now = pools, types, now
        self.nodes = nodes  # read only when a pending job asks for GPU shards (shard_units)
        self._shard_units: dict[str, float] | None = None
        # whether the admin lets the daemon requeue: an opted-in job is preemptible only then
        # (else the policy would plan rotations the daemon refuses every cycle)
        self.requeue = requeue
        # whether Slurm can turn a pending job into an MPS share (slurm/tres.py
        # updates_pending_gres): an opted-in job may share only then
        self.share = share
        # GPU type -> MPS units per GPU of its nodes with an MPS count (state._summarize)
        self.mps_units: Mapping[str, int] = mps_units or {}
        self.estimate = estimator.estimate
        self.scale, self.zero = max(nice_scale, 1), nice_zero
        self.reuse = reuse
        self.old_p, self.old_r = old_pending, old_running

    def pending(self, job: Job, types: tuple[str, ...] | None = None
                ) -> tuple[str | None, PendingEntry | None]:
        """(asked GPU type or constraint, "" = neither; None = no GPU asked, entry: None =
        no record: held or waiting on other than GPUs (waits_on_other), no estimate or no
        usable type). `types`: the GPU types the job may
        use (those of its partitions, build_state); None = all the pools' types. The estimator
        is asked about those only, and the entry records them: an entry built for other types
        (the job moved to another partition, a partition lost a type) is not reused."""
        pe = self.old_p.get(job.job_id)
        sub = job.submit_time
        now = self.now
        if types is None:
            types = self.types
        # the backend handed back the very same (immutable) Job as last cycle
        same = pe if pe is not None and pe[4] is job and sub is not None else None
        gpu = job.gpu
        if gpu is None:
            share = self._shard_share(job, types)
            if share is None:
                return None, None
            job, types, gpu = share
            same = None
        tkey = same[5] if same is not None else (gpu.gpu_type or job.features or "").lower()
        if job.held or waits_on_other(job.reason):
            return tkey, None
        if same is not None:
            key = same[0]
        else:
            key = (job.account, job.user, sub, now if sub is None else None, gpu, job.nice,
                   job.features, job.requeue, job.restarts)
        same_key = pe is not None and pe[0] == key
        if pe is not None and (same_key or _only_nice_or_features(pe[0], key)):
            # the same gpu asked before (num > 0); at most the daemon's own Nice/Features
            # update differs, and then the record is the same but for those
            est = self.estimate(job, types)
            if est is None:
                return tkey, None
            if (est is pe[1] or est == pe[1]) and (pe[2] is types or pe[2] == types):
                pj = pe[3] if same_key else replace(pe[3], features=job.features,
                                                    nice=self._nice(job))
                return tkey, (key, est, types, pj, job, tkey)  # newest Job: `is` hits
            num, frac = self._shape(job, gpu, types)
        else:
            num, frac = self._shape(job, gpu, types)
            if num <= 0:
                return tkey, None
            est = self.estimate(job, types)
            if est is None:
                return tkey, None
        # all the pools' types, or the subset its partitions hold
        allowed: Collection[str] = self.pools if types is self.types else types
        runtimes = {t: float(r) for t, r in est.runtime_s.items() if t in allowed and r > 0}
        if num > 1 and frac >= 1.0:  # a MIG instance runs no multi-GPU job (predict/mig.py)
            runtimes = {t: r for t, r in runtimes.items() if t not in self.pools
                        or self.pools[t].gpu_share == 1.0}
        if not runtimes:
            return tkey, None
        pj = PendingJob(
            job_id=job.job_id, account=job.account, user=job.user,
            submit_time=float(sub if sub is not None else now),
            num_gpus=num, runtime_s=runtimes, gpu_fraction=frac,
            mps_slowdown=dict(est.mps_slowdown), pinned_type=gpu.gpu_type.lower() if gpu.gpu_type else None,
            nice=self._nice(job), features=job.features, memory_gb=est.memory_gb,
            preemptible=bool(self.requeue and est.checkpoint and job.requeue),
            restarts=job.restarts,
            may_share=bool(self.share and est.may_share and convertible_to_share(gpu)),
        )
        return tkey, (key, est, types, pj, job, tkey)

    def shard_units(self) -> Mapping[str, float]:
        """GPU type -> the shards of one of its GPUs, the fewest over its usable nodes of one
        GPU type with shards (node_shards_per_gpu: Slurm spreads a node's shards evenly)."""
        if self._shard_units is None:
            one_type = {n.name: n for n in self.nodes
                        if n.usable and sum(1 for c in n.gpus.values() if c > 0) == 1}
            out: dict[str, float] = {}
            for name, per in node_shards_per_gpu(one_type.values()).items():
                gtype = next(t for t, c in one_type[name].gpus.items() if c > 0).lower()
                out[gtype] = min(out.get(gtype, per), per)
            self._shard_units = out
        return self._shard_units

    def _shard_share(self, job: Job, types: tuple[str, ...]
                     ) -> tuple[Job, tuple[str, ...], GpuRequest] | None:
        """A pending job asking for GPU shards as the MPS share of the same part of a GPU
        (share_on_its_gpus reads a running one so), and the types it may use: those of `types`
        whose nodes have shards. None: it asks for no shards, or no such type."""
        if not asks_shards(job.tres_per_job, job.tres_per_node):
            return None
        shards = requested_shards(job.tres_per_job, job.tres_per_node)
        units = self.shard_units()
        usable = tuple(t for t in types if t in units)
        if shards <= 0 or not usable:
            return None
        gpu = shard_request(shards, min(units[t] for t in usable),
                            mps_per_gpu(self.mps_units, None, usable))
        return replace(job, gpu=gpu), usable, gpu

    def _shape(self, job: Job, gpu: GpuRequest, types: tuple[str, ...]) -> tuple[int, float]:
        """gpu_shape, an MPS request read by the units per GPU of the types the job may use."""
        if gpu.mps <= 0 or not self.mps_units:
            return gpu_shape(job)
        return gpu_shape(job, mps_per_gpu(self.mps_units, gpu.gpu_type, types))

    def _nice(self, job: Job) -> int:
        """The job's Nice in policy units: Slurm's / nice_scale + nice_zero."""
        return (job.nice if self.scale == 1 else round(job.nice / self.scale)) + self.zero

    def running(self, job: Job) -> RunningEntry:
        """The entry of a running job holding GPUs."""
        now, types = self.now, self.types
        re_ = self.old_r.get(job.job_id)
        if (self.reuse and re_ is not None and re_[5] is job and re_[2] is types
                and job.start_time is not None):
            # the very same Job as last cycle and a repeatable estimator: only the clamp moves
            rj = re_[4]
            end = max(re_[3], now)
            if rj.expected_end != end:
                return (re_[0], re_[1], types, re_[3], replace(rj, expected_end=end), job)
            return re_
        start_t = job.start_time
        # the very same Job as last cycle
        same_r = re_ if re_ is not None and re_[5] is job and start_t is not None else None
        est_r = self.estimate(job, types) if self.pools else None  # (a repeatable one: above)
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
            return (rkey, est_r, types, expected, rj, job)
        expected, rj = running_record(job, self.pools, est_r, now, self.mps_units, self.requeue)
        return (rkey, est_r, types, expected, rj, job)


def _only_nice_or_features(before: tuple[object, ...], now: tuple[object, ...]) -> bool:
    """Whether two pending-job keys (account, user, submit, now, GPU request, nice, features,
    requeue, restarts) differ at most in nice and features."""
    return before[:5] == now[:5] and before[7:] == now[7:]


def gpu_shape(job: Job, per_gpu: int = MPS_PER_GPU) -> tuple[int, float]:
    """(GPUs, fraction of each) a job asks for; an MPS-only request is one GPU's share: its
    gres/mps count over `per_gpu`, the MPS units of one GPU (Slurm's count per GPU is whatever
    the node's gres.conf says: Gres=gpu:4,mps:800 is 200 per GPU)."""
    req = job.gpu
    if req is None:
        return 0, 1.0
    if req.mps > 0:
        per = max(per_gpu, 1)
        return max(req.count, 1), min(req.mps, per) / per
    return req.count, 1.0


def mps_per_gpu(units: Mapping[str, int], pinned: str | None, types: Iterable[str]) -> int:
    """The MPS units of one GPU a pending job's gres/mps count is read by. `units`: GPU type ->
    units per GPU, for the types whose nodes have an MPS count (no other node can run an MPS
    job). Pinned to a type: that type's. Else the types it may use (`types`) with an MPS count:
    their common value, or when they disagree the fewest (the largest share the request can be
    on any of them: a record never says less of a GPU than the job holds where it lands);
    MPS_PER_GPU when none has a count."""
    if pinned:
        return units.get(pinned.lower(), MPS_PER_GPU)
    return min((units[t] for t in types if t in units), default=MPS_PER_GPU)


def _running_type(job: Job, pools: Mapping[str, GpuPool]) -> str:
    for raw, count in job.alloc_gpus.items():
        if count > 0 and raw.lower() in pools:
            return raw.lower()
    return next(iter(job.alloc_gpus), "").lower()


def running_record(job: Job, pools: Mapping[str, GpuPool], est: JobEstimate | None,
                   now: float, mps_units: Mapping[str, int] | None = None,
                   requeue: bool = True) -> tuple[float, RunningJob]:
    """(expected end before clamping to now, the RunningJob); an MPS share is read by the
    units per GPU of the type it runs on (`mps_units`, as for RecordBuilder); preemptible only
    with `requeue` on (RecordBuilder)."""
    gtype = _running_type(job, pools)
    num = sum(c for c in job.alloc_gpus.values() if c > 0)
    _, frac = gpu_shape(job, (mps_units or {}).get(gtype, MPS_PER_GPU))
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
        preemptible=bool(requeue and est is not None and est.checkpoint and job.requeue),
        restarts=job.restarts,
        runtime_s={} if est is None else {t: r for t, r in est.runtime_s.items()
                                          if t in pools and r > 0})


def shares_a_gpu(job: Job) -> bool:
    """Whether a job asks for part of a GPU: an MPS share or GPU shards."""
    gpu = job.gpu
    return (gpu is not None and gpu.mps > 0) or asks_shards(job.tres_per_job, job.tres_per_node)


def shard_request(shards: int, shards_per_gpu: float, mps_per_gpu: int) -> GpuRequest:
    """The MPS request of the same part of one GPU as `shards` of its `shards_per_gpu` (at
    most the whole GPU), in `mps_per_gpu` units: how the daemon reads a shard job."""
    return GpuRequest(0, None, "node", max(1, round(min(shards / shards_per_gpu, 1.0)
                                                    * mps_per_gpu)))


def share_on_its_gpus(job: Job, nodes: Mapping[str, Node],
                      mps_units: Mapping[str, int]) -> Job | None:
    """A running job holding part of a GPU, with that GPU on each of its nodes as alloc_gpus:
    Slurm's AllocTRES counts MPS units or shards there, no GPU (the simulator's jobs name their
    GPU). A shard job is read as the MPS share of the same part of a GPU (its shards over its
    node's shards per GPU, in `mps_units` of that type), so the policies count it like one.
    None when its first node is unknown or not of one GPU type, or it holds no part of a GPU."""
    names = hostlist.expand(job.nodes) if job.nodes else []
    node = nodes.get(names[0]) if names else None
    held = [t for t, n in node.gpus.items() if n > 0] if node is not None else []
    if node is None or len(held) != 1:
        return None
    gtype = held[0]
    gpu = job.gpu
    if gpu is None or gpu.mps <= 0:
        shards = requested_shards(job.tres_per_job, job.tres_per_node)
        per_gpu = node_shards_per_gpu([node]).get(node.name, 0.0)
        if shards <= 0 or per_gpu <= 0:
            return None
        gpu = shard_request(shards, per_gpu, mps_units.get(gtype.lower(), MPS_PER_GPU))
    return replace(job, alloc_gpus={gtype: len(names)}, gpu=gpu)

