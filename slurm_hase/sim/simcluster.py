"""SimCluster: the simulated controller's state, i.e. the pending queue, running jobs, node GPU
allocations and MPS-shared GPUs, and the job-end times it emits.

Scheduling itself (multifactor priority, main scheduler, backfill) lives in sched.py and calls
`start()`; the SlurmBackend protocol on top of this state (views, updates, requeue) is SimSlurm
in simslurm.py. GPUs of one type form a pool a job may span (like --gpus=N).
"""

from __future__ import annotations

import heapq
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from slurm_hase.policy.common import fast_types
from slurm_hase.predict.descriptor import WorkloadDescriptor
from slurm_hase.sim.admission import feature_map, refusal, types_allowed
from slurm_hase.sim.cluster import ClusterSpec
from slurm_hase.sim.throughput import ThroughputTable
from slurm_hase.sim.traces import TraceJob
from slurm_hase.slurm.types import (
    AccountingRecord,
    GpuRequest,
    Job,
    JobState,
    Node,
    SchedulerDepths,
)


@dataclass(eq=False)
class SharedGpu:
    """One GPU shared through MPS: residents (job idx) and the share they hold."""

    node: int
    gpu_type: str
    used: float = 0.0
    residents: list[int] = field(default_factory=list)


@dataclass(eq=False, slots=True)
class SimJob:
    """Mutable state of one simulated job."""

    idx: int
    trace: TraceJob
    runtime: dict[str, float]  # true exclusive runtime per GPU type
    time_limit: float
    features: str = ""
    pinned: str | None = None
    nice: int = 0
    held: bool = False
    state: JobState = JobState.PENDING
    reason: str = "None"
    priority: int = 0
    prio_base: int = 0  # the multifactor sum before Nice (priority = max(1, base - nice))
    start: float = -1.0
    end: float = -1.0
    gpu_type: str = ""
    alloc: list[tuple[int, int]] = field(default_factory=list)  # (node, GPUs)
    shared: SharedGpu | None = None
    work_left: float = 1.0  # fraction of the job still to run
    rate: float = 0.0  # fraction per second now
    last: float = 0.0  # time work_left was last brought up to date
    version: int = 0
    view: Job | None = None
    last_view: Job | None = None  # the latest view built, kept when `view` is invalidated
    comment: str = ""
    # memos (performance only): allowed_types for (features, pinned); GpuRequest for pinned
    allowed_for: tuple[str, str | None] | None = None
    allowed: tuple[str, ...] = ()
    req: GpuRequest | None = None
    restarts: int = 0  # times requeued
    run_before: float = 0.0  # seconds run in segments before the latest requeue
    first_start: float = -1.0
    earlier_gpu_s: dict[str, float] = field(default_factory=dict)  # GPU-s of earlier segments by type
    requeued_at: float = -1.0  # Slurm's SubmitTime after a requeue (-1 = never requeued)
    trace_types: tuple[str, ...] = ()  # what its trace row's constraint and pin allow (rho)
    frac: float = 1.0

    @property
    def job_id(self) -> str:
        return self.trace.job_id


def grown(array: np.ndarray, index: int) -> np.ndarray:
    """`array`, or a copy at least twice as long (zero-filled) when `index` is past its end."""
    if index < len(array):
        return array
    out = np.zeros(max(2 * len(array), index + 1, 1024), array.dtype)
    out[:len(array)] = array
    return out


class PendingQueue(dict[str, SimJob]):
    """The pending jobs by id. Remembers every job put in (submitted or requeued) in `entered`,
    which the scheduler drains to keep its cached priority order (sched.py) up to date, and
    marks the pending jobs' indexes in a numpy mask (`indexes()`, for whole-queue passes)."""

    def __init__(self) -> None:
        super().__init__()
        self.entered: list[SimJob] = []
        self._mask = np.zeros(1024, np.bool_)

    def __setitem__(self, key: str, job: SimJob) -> None:
        old = self.get(key)
        if old is not None:
            self._mask[old.idx] = False
        super().__setitem__(key, job)
        self._mask = grown(self._mask, job.idx)
        self._mask[job.idx] = True
        self.entered.append(job)

    def __delitem__(self, key: str) -> None:
        self._mask[self[key].idx] = False
        super().__delitem__(key)

    def indexes(self) -> np.ndarray:
        """Indexes (SimJob.idx) of the pending jobs, ascending."""
        return np.flatnonzero(self._mask)


class SimCluster:
    """The simulated controller's state and job lifecycle (see module doc)."""

    def __init__(self, spec: ClusterSpec, table: ThroughputTable,
                 comments: Callable[[TraceJob, tuple[str, ...]], str] | None = None,
                 requeue_overhead_s: float = 0.0, hsbatch_slack: float = 0.0) -> None:
        self.spec = spec
        self.requeue_overhead_s = requeue_overhead_s
        self.hsbatch_slack = hsbatch_slack
        self.comments = comments
        self.table = table
        self.nodes_spec = spec.nodes
        self.type_order: list[str] = list(dict.fromkeys(n.gpu_type for n in spec.nodes))
        self.node_free = [n.gpus for n in spec.nodes]
        self.type_nodes: dict[str, list[int]] = {t: [] for t in self.type_order}
        for i, n in enumerate(spec.nodes):
            self.type_nodes[n.gpu_type].append(i)
        self.type_total = {t: sum(spec.nodes[i].gpus for i in ix) for t, ix in self.type_nodes.items()}
        self.type_free = dict(self.type_total)
        self.feature_types = feature_map(spec)
        self.shared: dict[str, list[SharedGpu]] = {t: [] for t in self.type_order}
        self.node_mps_used = [0.0] * len(spec.nodes)
        self.node_shared = [False] * len(spec.nodes)  # the node's one MPS-shared GPU is in use
        self.jobs_by_id: dict[str, SimJob] = {}
        self.by_idx: list[SimJob] = []
        self.pending = PendingQueue()
        # pending jobs whose priority changed outside sched.py (Nice); the scheduler drains it
        self.reordered: list[SimJob] = []
        self.running: dict[str, SimJob] = {}
        self.finished: list[SimJob] = []
        # job id -> sacct's records of its runs a requeue ended (SimSlurm.requeue)
        self.requeued_runs: dict[str, list[AccountingRecord]] = {}
        self.ended_since_calc: list[SimJob] = []
        self._ends: list[tuple[float, int, int, str]] = []  # (time, version, idx, id)
        self._node_views: list[Node | None] = [None] * len(spec.nodes)
        self._allowed_cache: dict[tuple[str, str | None], tuple[str, ...]] = {}
        self.now = 0.0
        self.busy_gpus: dict[str, float] = dict.fromkeys(self.type_order, 0.0)
        self.changed = True  # something the scheduler should look at happened
        self.state_version = 0  # bumped on every change a scheduling pass could react to
        self.job_set_version = 0  # bumped on every start and end
        self.depths = SchedulerDepths()  # what sched.py's passes look at (the engine sets it)

    # ------------------------------------------------------------------ job lifecycle

    def add(self, tj: TraceJob, now: float) -> SimJob:
        """Submit a trace job (what sbatch does; with hsbatch_slack > 0, what hsbatch does:
        an untyped job without a constraint gets the types at most (1 + slack) x slower than
        its fastest one, recorded in its description as hsbatch's)."""
        runtime = self.table.runtimes(tj.workload, tj.num_gpus, tj.duration_s, tuple(self.type_order))
        finite = [r for r in runtime.values() if math.isfinite(r)]
        limit = math.ceil(max(finite, default=tj.duration_s) * 1.05 / 60.0) * 60.0
        feats = "|".join(tj.constraint)
        auto: tuple[str, ...] = ()
        if self.hsbatch_slack > 0 and not feats and not tj.pinned:
            fast = fast_types({t: runtime[t] for t in self.type_order
                               if self.type_total[t] >= tj.num_gpus}, self.hsbatch_slack)
            if fast and len(fast) < len(finite):
                auto = tuple(t for t in self.type_order if t in fast)
                feats = "|".join(auto)
        if self.comments is not None:
            text = self.comments(tj, auto)
        elif tj.checkpoint or auto or tj.may_share:
            text = WorkloadDescriptor(checkpoint=tj.checkpoint, may_share=tj.may_share,
                                      auto_types=auto).to_comment()
        else:
            text = ""
        job = SimJob(len(self.jobs_by_id), tj, runtime, limit, features=sys.intern(feats),
                     pinned=tj.pinned, comment=text,
                     trace_types=self._types_for("|".join(tj.constraint), tj.pinned), frac=tj.gpu_fraction)
        self.jobs_by_id[tj.job_id] = job
        self.by_idx.append(job)
        need = 1 if tj.gpu_fraction < 1.0 else tj.num_gpus
        if refusal(self.allowed_types(job), runtime, self.type_total, need) is not None:
            job.state, job.reason = JobState.CANCELLED, "ReqNodeNotAvail"  # sbatch refuses it
            return job
        self.pending[tj.job_id] = job
        self.touch()
        return job

    def allowed_types(self, job: SimJob) -> tuple[str, ...]:
        """GPU types whose nodes satisfy the job's Features OR-list and pinned type."""
        memo = job.allowed_for
        if memo is not None and memo[0] is job.features and memo[1] is job.pinned:
            return job.allowed
        hit = self._types_for(job.features, job.pinned)
        # a type without a measured throughput for this workload cannot run it (e.g. memory)
        job.allowed = tuple(t for t in hit if job.runtime[t] < math.inf)
        job.allowed_for = (job.features, job.pinned)
        return job.allowed

    def _types_for(self, features: str, pinned: str | None) -> tuple[str, ...]:
        """types_allowed on this cluster's nodes, memoised by (features, pinned)."""
        key = (features, pinned)
        hit = self._allowed_cache.get(key)
        if hit is None:
            hit = self._allowed_cache[key] = types_allowed(features, pinned, self.feature_types,
                                                           self.type_order)
        return hit

    def fits_now(self, job: SimJob, gtype: str) -> bool:
        """Whether `job` could start on `gtype` right now."""
        if job.frac < 1.0:
            need = job.frac
            if any(g.used + need <= 1.0 + 1e-9 for g in self.shared[gtype]):
                return True
            return self.type_free[gtype] >= 1 and self._new_share_node(gtype) >= 0
        return self.type_free[gtype] >= job.trace.num_gpus

    def _new_share_node(self, gtype: str) -> int:
        """A node of `gtype` where MPS may share a GPU it has free (-1: none). Slurm shares one
        GPU a node through MPS at a time (22.05 and 24.11 alike: a share that does not fit
        what the node's MPS GPU has left waits, beside free GPUs; docs/simulator.md)."""
        shared, free = self.node_shared, self.node_free
        for i in self.type_nodes[gtype]:
            if free[i] > 0 and not shared[i]:
                return i
        return -1

    def any_room(self) -> bool:
        """Whether any job could start at all: a free GPU, or room on an MPS-shared one."""
        return (any(self.type_free.values())
                or any(g.used < 1.0 - 1e-9 for gpus in self.shared.values() for g in gpus))

    def start(self, job: SimJob, gtype: str, now: float) -> None:
        """Allocate GPUs of `gtype` and start the job (caller checked fits_now)."""
        del self.pending[job.job_id]
        self.running[job.job_id] = job
        job.state, job.reason, job.start, job.gpu_type, job.last = JobState.RUNNING, "None", now, gtype, now
        if job.first_start < 0:
            job.first_start = now
        job.view = job.last_view = None  # a running job's view is built afresh
        if job.frac < 1.0:
            self._start_shared(job, gtype, now)
        else:
            self._take_whole(job, gtype)
            job.rate = 1.0 / job.runtime[gtype]
            self._push_end(job, now + job.work_left * job.runtime[gtype])
        self.busy_gpus[gtype] += job.trace.num_gpus * job.frac
        self.touch()
        self.job_set_version += 1

    def _take_whole(self, job: SimJob, gtype: str) -> None:
        need = job.trace.num_gpus
        nodes = self.type_nodes[gtype]
        best = -1
        for i in nodes:  # best fit on one node when possible
            free = self.node_free[i]
            if free >= need and (best < 0 or free < self.node_free[best]):
                best = i
                if free == need:
                    break
        picks: list[tuple[int, int]] = []
        if best >= 0:
            picks = [(best, need)]
        else:
            left = need
            for i in nodes:
                take = min(self.node_free[i], left)
                if take > 0:
                    picks.append((i, take))
                    left -= take
                if left == 0:
                    break
        for i, take in picks:
            self.node_free[i] -= take
            self._node_views[i] = None
        self.type_free[gtype] -= need
        job.alloc = picks

    def _start_shared(self, job: SimJob, gtype: str, now: float) -> None:
        need = job.frac
        room = [g for g in self.shared[gtype] if g.used + need <= 1.0 + 1e-9]
        if room:
            gpu = max(room, key=lambda g: g.used)  # best fit
        else:
            node = self._new_share_node(gtype)
            self.node_shared[node] = True
            self.node_free[node] -= 1
            self.type_free[gtype] -= 1
            gpu = SharedGpu(node, gtype)
            self.shared[gtype].append(gpu)
        gpu.used += need
        gpu.residents.append(job.idx)
        self.node_mps_used[gpu.node] += need
        self._node_views[gpu.node] = None
        job.shared = gpu
        job.alloc = [(gpu.node, 1)]
        self._rerate(gpu, now)

    def _rerate(self, gpu: SharedGpu, now: float) -> None:
        """Bring residents' progress up to date and give them their new interference rate."""
        jobs = [self._by_idx(i) for i in gpu.residents]
        for job in jobs:
            job.work_left = max(job.work_left - job.rate * (now - job.last), 0.0)
            job.last = now
            factor = 1.0
            for other in jobs:
                if other is not job:
                    factor = min(factor, self.table.pair_factor(gpu.gpu_type, job.trace.workload,
                                                                other.trace.workload))
            job.rate = factor / job.runtime[gpu.gpu_type]
            job.version += 1
            self._push_end(job, now + job.work_left / job.rate)

    def _by_idx(self, idx: int) -> SimJob:
        return self.by_idx[idx]

    def _push_end(self, job: SimJob, t: float) -> None:
        job.end = t
        heapq.heappush(self._ends, (t, job.version, job.idx, job.job_id))

    def next_end(self) -> float:
        """Time of the next job end (inf if none)."""
        while self._ends:
            t, ver, _, jid = self._ends[0]
            job = self.running.get(jid)
            if job is not None and job.version == ver:
                return t
            heapq.heappop(self._ends)
        return math.inf

    def finish_until(self, now: float) -> int:
        """End every job whose end time is <= now; returns how many ended."""
        n = 0
        while self.next_end() <= now:
            t, _, _, jid = heapq.heappop(self._ends)
            self._finish(self.running[jid], t)
            n += 1
        return n

    def _finish(self, job: SimJob, t: float) -> None:
        del self.running[job.job_id]
        job.state, job.end, job.view, job.last_view = JobState.COMPLETED, t, None, None
        self.busy_gpus[job.gpu_type] -= job.trace.num_gpus * job.frac
        gpu = job.shared
        if gpu is not None:
            gpu.used -= job.frac
            gpu.residents.remove(job.idx)
            self.node_mps_used[gpu.node] -= job.frac
            self._node_views[gpu.node] = None
            if not gpu.residents:
                self.shared[gpu.gpu_type].remove(gpu)
                self.node_shared[gpu.node] = False
                self.node_free[gpu.node] += 1
                self.type_free[gpu.gpu_type] += 1
            else:
                self._rerate(gpu, t)
        else:
            self._release_whole(job)
        self.finished.append(job)
        self.ended_since_calc.append(job)
        self.touch()
        self.job_set_version += 1

    def _release_whole(self, job: SimJob) -> None:
        """Give a whole-GPU job's GPUs back to their nodes."""
        for i, take in job.alloc:
            self.node_free[i] += take
            self._node_views[i] = None
        self.type_free[job.gpu_type] += job.trace.num_gpus

    def touch(self) -> None:
        """Record a change a scheduling pass could react to."""
        self.changed = True
        self.state_version += 1
