"""The policy's view of the cluster: GPU pools, estimated pending and running jobs.

build_state turns what the backend reports (jobs, nodes) plus the estimator's predictions into
a ClusterState; a StateCache (one per backend) reuses the records of unchanged jobs between
cycles (digest.py digests the inputs). All steps are O(jobs + nodes).

A pending job may only use the GPU types that usable nodes of its own partition(s) hold: its
PendingJob's runtime_s (what every policy routes over) has no other type. A job none of whose
partitions has a usable GPU node is not restricted (it cannot run anyway).
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import TYPE_CHECKING

from slurm_hase.daemon.records import (
    DEFAULT_RUNTIME_S,
    JobEstimate,
    PendingEntry,
    RecordBuilder,
    RunningEntry,
    RuntimeEstimator,
    begins_later,
    share_on_its_gpus,
    shares_a_gpu,
    waits_on_other,
)
from slurm_hase.daemon.safety import Capacity, feature_spelling, lower_features
from slurm_hase.policy.common import stale_entries_due
from slurm_hase.policy.types import ClusterState, GpuPool, PendingJob, RunningJob
from slurm_hase.predict.mig import gpu_share
from slurm_hase.slurm.types import Job, JobState, Node

if TYPE_CHECKING:
    from slurm_hase.daemon.cycle import CycleConfig

__all__ = ["DEFAULT_RUNTIME_S", "JobEstimate", "RuntimeEstimator", "StateCache", "build_state",
           "job_in_partitions"]


def _repeatable(estimator: RuntimeEstimator) -> bool:
    return getattr(estimator, "repeatable", False) is True


# every field of a pending Job but those Slurm changes on its own while the job waits: its
# priority (age and fairshare move), its pending reason and backfill's projected start and end.
# No pending record (nor a repeatable estimate, records.RuntimeEstimator) depends on them
_WAITING_MOVES = ("priority", "reason", "start_time", "end_time")
_UNMOVED_WHILE_WAITING = operator.attrgetter(*(f.name for f in fields(Job)
                                               if f.name not in _WAITING_MOVES))


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
    Capacity (reused while the very same Node objects come back), with the GPU types of each
    partition; per partition string of a job: the types it may use; per built record: its
    digest text. The pending entries are updated in place; those of jobs gone since are dropped
    in bulk once they outnumber the pending jobs (build_state). Every job entry is dropped when
    the nodes' MPS units per GPU change (a record's MPS share was read by them) or requeue is
    turned on or off (a record's preemptible follows it).
    """

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.summary: tuple[dict[str, GpuPool], Capacity] | None = None
        self.pending: dict[str, PendingEntry] = {}
        self.running: dict[str, RunningEntry] = {}
        self.texts: dict[str, tuple[object, str]] = {}  # job id -> (record, repr of its key)
        self.types: tuple[str, ...] = ()
        self.node_parts: dict[str, tuple[Node, NodePart]] = {}  # node name -> (node, its part)
        self.cap_parts: list[CapPart | None] = []  # what the Capacity was built of
        # partition -> GPU types of its usable nodes; the same object while equal (summary)
        self.part_types: PartTypes = {}
        # job's partition string -> the types of `types` it may use (_job_types), valid for
        # these (types, part_types) objects; None in `job_types`: every job may use all
        self.job_types: dict[str, tuple[str, ...]] | None = None
        self.job_types_for: tuple[object, object] | None = None
        self.mps_units: MpsUnits = {}  # of `nodes` (_summarize)
        self.requeue: bool | None = None  # CycleConfig.requeue the job entries were built with
        # whether Slurm applies a pending job's gres update (None: not known yet: run_cycle asks)
        self.pending_gres: bool | None = None
        self.share: bool | None = None  # pending_gres as the job entries were built with


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


# partitions, (type, GPUs, the type as the node's Features spell it)
CapPart = tuple[tuple[str, ...], tuple[tuple[str, int, str], ...]]
NodePart = tuple[tuple[tuple[str, int, int, int], ...], CapPart | None]
PartTypes = dict[str, frozenset[str]]  # partition -> GPU types its usable nodes hold
MpsUnits = dict[str, int]  # GPU type -> MPS units of one GPU, on its nodes with an MPS count
Summary = tuple[dict[str, GpuPool], Capacity, PartTypes, MpsUnits]


def _node_part(node: Node) -> NodePart:
    """What one node adds: (type, GPUs, free, MPS total) per GPU type when usable, and what
    Capacity counts of it (partitions, (type, GPUs) with the type in Features; None: nothing)."""
    if not node.usable:
        return (), None
    entries = []
    cap: list[tuple[str, int, str]] = []
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
            cap.append((gtype, count, feature_spelling(node.features, gtype)))
    return tuple(entries), ((node.partitions, tuple(cap)) if cap else None)


def _summarize(nodes: Sequence[Node], cache: StateCache | None = None) -> Summary:
    """GPU pools, feature Capacity, GPU types by partition and MPS units per GPU (gres/mps
    count over GPUs: Slurm splits a node's count evenly over its GPUs; a type none of whose
    nodes has an MPS count is left out, as no node of it can run an MPS job) of usable nodes,
    in one pass. With `cache`, a node object seen last time is not read again, and the
    Capacity stands while no node's part of it changed (allocations do not change it)."""
    # type -> [total, free, nodes, max_per_node, mps_total, GPUs of nodes with an MPS count]
    acc: dict[str, list[int]] = {}
    old = cache.node_parts if cache is not None else {}
    parts: dict[str, tuple[Node, NodePart]] = {}
    cap_parts: list[CapPart | None] = []
    by_parts: dict[tuple[str, ...], set[str]] = {}  # a node's partitions -> their GPU types
    for node in nodes:
        hit = old.get(node.name)
        part = hit[1] if hit is not None and hit[0] is node else _node_part(node)
        parts[node.name] = (node, part)
        if part[0]:
            held = by_parts.get(node.partitions)
            if held is None:
                held = by_parts[node.partitions] = set()
            for gtype, count, free, mps in part[0]:
                held.add(gtype)
                entry = acc.get(gtype)
                if entry is None:
                    entry = acc[gtype] = [0, 0, 0, 0, 0, 0]
                entry[0] += count
                entry[1] += free
                entry[2] += 1
                if count > entry[3]:
                    entry[3] = count
                if mps > 0:
                    entry[4] += mps
                    entry[5] += count
        cap_parts.append(part[1])
    if cache is not None and cache.summary is not None and cache.cap_parts == cap_parts:
        cap = cache.summary[1]
    else:
        cap = Capacity()
        for cp in cap_parts:
            if cp is not None:
                node_partitions, counts = cp
                for gtype, count, spelled in counts:
                    cap.add(node_partitions, gtype, count, spelled)
    if cache is not None:
        cache.node_parts, cache.cap_parts = parts, cap_parts
    mps_units = {gtype: max(e[4] // e[5], 1) for gtype, e in acc.items() if e[5]}
    pools = {}
    for gtype, (total, free, n_nodes, per_node, _, _) in sorted(acc.items()):
        # the units of one GPU on the nodes with an MPS count (the others have none to split)
        pools[gtype] = GpuPool(gtype, total, free, n_nodes, per_node, mps_units.get(gtype, 100),
                               gpu_share(gtype))
    held_by: dict[str, set[str]] = {}
    for node_partitions, gtypes in by_parts.items():
        for name in node_partitions:
            held_by.setdefault(name, set()).update(gtypes)
    part_types = {name: frozenset(gtypes) for name, gtypes in held_by.items()}
    return pools, cap, part_types, mps_units


def _node_summary(nodes: Sequence[Node], cache: StateCache | None) -> Summary:
    """_summarize, reused while the very same Node objects come back (`cache`); the cache's
    part_types stays the same object while its content does. When the nodes' MPS units per
    GPU change, the cache's job entries are dropped (records read MPS requests by them)."""
    if cache is None:
        return _summarize(nodes)
    prev = cache.nodes
    if (cache.summary is None or len(prev) != len(nodes)
            or not all(map(operator.is_, prev, nodes))):
        pools, cap, part_types, units = _summarize(nodes, cache)
        cache.summary = (pools, cap)
        if part_types != cache.part_types:
            cache.part_types = part_types
        if units != cache.mps_units:
            cache.mps_units = units
            cache.pending.clear()
            cache.running = {}
        cache.nodes = list(nodes)
    return cache.summary[0], cache.summary[1], cache.part_types, cache.mps_units


def _types_for(partition: str, types: tuple[str, ...], part_types: PartTypes
               ) -> tuple[str, ...]:
    """The types of `types` usable nodes of the job's partitions (comma-separated) hold:
    `types` itself when that is all of them or when none of its partitions has any."""
    allowed: set[str] = set()
    known = False
    for name in partition.split(","):
        held = part_types.get(name)
        if held is not None:
            known = True
            allowed.update(held)
    if not known:
        return types
    sub = tuple(t for t in types if t in allowed)
    return types if len(sub) == len(types) else sub


def _job_types(types: tuple[str, ...], part_types: PartTypes, cache: StateCache | None
               ) -> dict[str, tuple[str, ...]] | None:
    """Partition string -> the types a job there may use (filled in as jobs ask: _types_for);
    None when every job may use all `types` (each partition holds all of them). With `cache`,
    the same dict while `types` and `part_types` are the same objects, and an entry whose
    types did not change stays the same tuple object (the entries' `is` checks hit)."""
    if all(held.issuperset(types) for held in part_types.values()):
        job_types = None
    elif cache is not None and cache.job_types_for is not None and (
            cache.job_types_for[0] is types and cache.job_types_for[1] is part_types):
        return cache.job_types
    else:
        job_types = {}
        if cache is not None and cache.job_types:
            for partition, before in cache.job_types.items():
                now = _types_for(partition, types, part_types)
                job_types[partition] = before if now is not types and now == before else now
    if cache is not None:
        cache.job_types, cache.job_types_for = job_types, (types, part_types)
    return job_types


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

    With `cache` (the same object every cycle), records of unchanged jobs are reused; an
    estimator that is not `repeatable` (records.RuntimeEstimator) is still asked about every
    job, exactly as without it.
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
) -> tuple[ClusterState, dict[str, Job], dict[str, int], dict[str, float]]:
    """build_state, and in the same pass the pending jobs in managed partitions by id, their
    count by asked GPU type or constraint ("" = neither), and the recorded ones whose begin
    time is past CycleConfig.begin_horizon_s -> when they come within it (records.begins_later:
    the cycle decides around them)."""
    all_pools, _, part_types, mps_units = _node_summary(nodes, cache)
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
    if config.partitions is not None:
        jobs = [j for j in jobs if job_in_partitions(j, config.partitions)]
    # partition string -> the types a pending job there may use (None: all of `types`)
    job_types = _job_types(types, part_types, cache)
    share = bool(cache is not None and cache.pending_gres)
    if cache is not None and (cache.requeue, cache.share) != (config.requeue, share):
        # a record says whether its job is preemptible, which only requeue on allows, and
        # whether it may share, which only a Slurm that applies gres updates allows
        cache.pending.clear()
        cache.running = {}
        cache.requeue, cache.share = config.requeue, share
    # last cycle's entries, updated in place: an unchanged job costs no insert (pruned below)
    entries = cache.pending if cache is not None else {}
    reuse = _repeatable(estimator)
    builder = RecordBuilder(pools, types, estimator, now, config.nice_scale, config.nice_zero,
                            reuse, entries, cache.running if cache is not None else {},
                            mps_units, config.requeue, nodes, share)
    pending: list[PendingJob] = []
    running: list[RunningJob] = []
    new_r: dict[str, RunningEntry] = {}
    pending_jobs: dict[str, Job] = {}  # every pending job by id (plan_updates looks them up)
    by_type: dict[str, int] = {}
    pending_state, running_state = JobState.PENDING, JobState.RUNNING
    later: dict[str, float] = {}
    horizon_s = config.begin_horizon_s
    by_name: dict[str, Node] | None = None  # nodes by name, once a job sharing a GPU runs
    for job in jobs:
        state = job.state
        if state is pending_state:
            job_id = job.job_id
            pending_jobs[job_id] = job
            entry = entries.get(job_id)
            if job_types is None:
                jtypes = types
            else:
                jtypes_or = job_types.get(job.partition)
                if jtypes_or is None:
                    jtypes_or = job_types[job.partition] = _types_for(job.partition, types,
                                                                      part_types)
                jtypes = jtypes_or
            if (reuse and entry is not None and entry[2] is jtypes and job.submit_time is not None
                    and (entry[4] is job
                         or (_UNMOVED_WHILE_WAITING(entry[4]) == _UNMOVED_WHILE_WAITING(job)
                             and not waits_on_other(job.reason)))):
                # the very same Job as last cycle, or a new one (squeue parses new ones every
                # cycle) equal to it but for what moves while it waits; the same types (its
                # partitions') and an estimator that would answer the same: the entry stands
                if entry[4] is not job:
                    entry = entries[job_id] = (*entry[:4], job, entry[5])
                by_type[entry[5]] = by_type.get(entry[5], 0) + 1
            else:
                tkey, entry = builder.pending(job, jtypes)
                if tkey is None:
                    entries.pop(job_id, None)
                    continue  # no GPU asked
                by_type[tkey] = by_type.get(tkey, 0) + 1
                if entry is None:
                    entries.pop(job_id, None)
                    continue  # held, no estimate or no usable type
                entries[job_id] = entry
            pending.append(entry[3])
            if job.eligible_time is not None:  # begins_later's own test, inline: a hot loop
                comes = begins_later(job, now, horizon_s)
                if comes is not None:
                    later[job_id] = comes
        elif state is running_state:
            if not job.alloc_gpus:
                if not shares_a_gpu(job):
                    continue  # no GPU
                if by_name is None:
                    by_name = {n.name: n for n in nodes}
                job_or = share_on_its_gpus(job, by_name, mps_units)
                if job_or is None:
                    continue
                job = job_or
            entry_r = builder.running(job)
            running.append(entry_r[4])
            new_r[job.job_id] = entry_r
    if cache is not None:
        # Entries of jobs gone since are harmless (one is reused only for the Job it was built
        # from, one equal to it but for what moves while it waits, or an equal key and
        # estimate): they are dropped in bulk, rarely.
        if stale_entries_due(len(entries), len(pending)):
            for gone in entries.keys() - pending_jobs.keys():
                del entries[gone]
        cache.running = new_r
    state_out = ClusterState(now=now, pools=pools, pending=pending, running=running,
                             shares=dict(shares), usage=dict(ledger_usage))
    return state_out, pending_jobs, by_type, later
