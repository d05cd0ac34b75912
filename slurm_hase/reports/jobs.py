"""One job's facts for the reports: the GPUs it held (by type), whether it ever ran, how long it
held them, and which records are the runs of one job (a requeued job has one record per run).

Pure functions over AccountingRecord; fairness.py adds them up per account and user.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TypeVar

from slurm_hase.slurm import hostlist
from slurm_hase.slurm.tres import gpus_from_tres, mps_from_tres, shards_from_tres
from slurm_hase.slurm.types import AccountingRecord, JobState, Node

UNTYPED = "untyped"  # GPUs allocated without a type
MPS_UNKNOWN = "mps"  # MPS share on a node whose GPU type is unknown
SHARD_UNKNOWN = "shard"  # GPU shards (gres/shard) on a node whose GPU type is unknown
RUNNING_STATES = frozenset({JobState.RUNNING, JobState.SUSPENDED, JobState.COMPLETING})
_REQUEUE_CAUSES = frozenset({JobState.PREEMPTED, JobState.NODE_FAIL})
_V = TypeVar("_V")
REQUEUE_GAP_S = 600  # most seconds from a run's end to the requeued job's next submit time


def job_gpus(rec: AccountingRecord, node_types: Mapping[str, str] | None = None,
             mps_per_gpu: int = 100, node_mps: Mapping[str, int] | None = None,
             node_shards: Mapping[str, float] | None = None) -> dict[str, float]:
    """GPUs held by one job, by type; fractional for MPS (the job's mps count over the MPS count
    of one GPU of its node, `node_mps`, else `mps_per_gpu`) and for shards (its shard count over
    the shard count of one GPU of its node, `node_shards`; where that is unknown, a whole GPU on
    each of its nodes: Slurm 22.05 takes a job's shards on a node from one GPU)."""
    out: dict[str, float] = {}
    for gpu_type, count in rec.alloc_gpus.items():
        key = gpu_type or UNTYPED
        out[key] = out.get(key, 0.0) + float(count)
    mps = mps_from_tres(rec.alloc_tres)
    if mps > 0 and not rec.alloc_gpus:
        key = _same_on_all(rec.nodes, node_types or {}) or MPS_UNKNOWN
        per_gpu = _same_on_all(rec.nodes, node_mps or {}) or mps_per_gpu
        out[key] = out.get(key, 0.0) + mps / float(per_gpu)
    shards = shards_from_tres(rec.alloc_tres)
    if shards > 0:
        key = _same_on_all(rec.nodes, node_types or {}) or SHARD_UNKNOWN
        per_gpu_shards = _same_on_all(rec.nodes, node_shards or {})
        held = shards / per_gpu_shards if per_gpu_shards else float(_node_count(rec.nodes))
        out[key] = out.get(key, 0.0) + held
    return out


def shards_per_gpu_unknown(rec: AccountingRecord, node_shards: Mapping[str, float] | None) -> bool:
    """Whether a job holds shards on nodes whose shard count per GPU is not known (a saved file,
    a node Slurm no longer shows, nodes that differ): job_gpus then counts it a whole GPU a
    node, an upper bound."""
    return (shards_from_tres(rec.alloc_tres) > 0
            and not _same_on_all(rec.nodes, node_shards or {}))


def shards_warning(job_ids: Sequence[str]) -> str:
    """The warning for shard jobs counted as whole GPUs (shards_per_gpu_unknown)."""
    shown = ", ".join(job_ids[:5]) + (f" and {len(job_ids) - 5} more" if len(job_ids) > 5 else "")
    return (f"the shard count per GPU of the nodes of {len(job_ids)} job(s) on GPU shards is "
            f"unknown (a saved file, nodes Slurm does not show now, or nodes that differ): each "
            f"counts as a whole GPU a node, more than it held ({shown})")


def _node_count(nodes: str) -> int:
    """How many nodes a NodeList names (at least 1)."""
    try:
        return max(len(hostlist.expand(nodes)), 1) if nodes else 1
    except ValueError:
        return 1


def cpu_only(rec: AccountingRecord) -> bool:
    """Whether a job is known to have asked for and held no GPU, MPS share nor GPU shard: its
    ReqTRES or AllocTRES is there and names none. Such a job is no part of a GPU report (a
    CPU-only account would sit at 0 in Jain's index as if starved of GPUs); a record without
    either (an squeue job sacct does not have) cannot tell and is kept."""
    if rec.alloc_gpus or not (rec.req_tres or rec.alloc_tres):
        return False
    return not any(gpus_from_tres(t) or mps_from_tres(t) or shards_from_tres(t)
                   for t in (rec.req_tres, rec.alloc_tres))


def _same_on_all(nodes: str, by_node: Mapping[str, _V]) -> _V | None:
    """The value every node of a NodeList (``a100-[1-2]``: AllocTRES counts a job's MPS over
    all its nodes) has in `by_node`; None when one lacks it, they differ, or it does not read."""
    if nodes in by_node:
        return by_node[nodes]
    try:
        names = hostlist.expand(nodes) if nodes else []
    except ValueError:
        return None
    values = {by_node.get(n) for n in names}
    return next(iter(values)) if len(values) == 1 else None


def started(rec: AccountingRecord) -> bool:
    """Whether the job ever ran: it runs now, or it has a start time and ran or got nodes.

    Slurm gives a job cancelled while pending a start time equal to its end time (or none),
    no nodes and 0 s elapsed; such a job never started.
    """
    if rec.state in RUNNING_STATES:
        return True
    return rec.start_time is not None and (rec.elapsed_s > 0 or bool(rec.nodes) or bool(rec.alloc_gpus))


def run_seconds(rec: AccountingRecord, window: tuple[int, int] | None = None,
                queried_at: float | None = None) -> float:
    """Seconds the job held its allocation, start to end, clipped to window=(start, end) epoch
    seconds when given. Time suspended counts, as the GPUs stay allocated: a job that ended
    counts start..end; one still running (no end yet) counts start..`queried_at`, when the
    records were asked for (sacct's Elapsed leaves suspended time out). Without `queried_at`
    (a saved file does not say when sacct ran) a running job counts start + Elapsed, which
    misses the time it spent suspended."""
    if rec.start_time is None:
        return 0.0
    end = rec.end_time if rec.end_time is not None else _end_so_far(rec, queried_at)
    lo, hi = ((rec.start_time, end) if window is None
              else (max(rec.start_time, window[0]), min(end, window[1])))
    return float(max(hi - lo, 0))


def _end_so_far(rec: AccountingRecord, queried_at: float | None) -> float:
    """Where the run time of a job with no end time stops: the query time for a running one
    (never before start + Elapsed: sacct may have run a moment after `queried_at` was taken),
    else start + Elapsed."""
    assert rec.start_time is not None
    elapsed_end = rec.start_time + max(rec.elapsed_s, 0)
    if queried_at is None or rec.state not in RUNNING_STATES:
        return float(elapsed_end)
    return max(float(queried_at), float(elapsed_end))


def node_gpu_types(nodes: Iterable[Node]) -> dict[str, str]:
    """Node -> its GPU type, for nodes with exactly one typed GPU GRES (an untyped `gpu:N`
    beside it is not a second type)."""
    out: dict[str, str] = {}
    for node in nodes:
        typed = [t for t in node.gpus if t]
        if len(typed) == 1:
            out[node.name] = typed[0]
    return out


def guess_node_types(records: Iterable[AccountingRecord]) -> dict[str, str]:
    """Node -> GPU type seen on it in typed single-node allocations (one type only)."""
    seen: dict[str, set[str]] = {}
    for rec in records:
        typed = [t for t in rec.alloc_gpus if t]
        if rec.nodes and typed and "," not in rec.nodes and "[" not in rec.nodes:
            seen.setdefault(rec.nodes, set()).update(typed)
    return {node: next(iter(types)) for node, types in seen.items() if len(types) == 1}


def job_runs(records: Iterable[AccountingRecord]) -> list[list[AccountingRecord]]:
    """Records grouped into jobs: the runs of one job (a requeued job has one record per run,
    all with its job id; a job of one run is a group of one), each group in run order (by
    submit time: a requeue resets it), the groups of one id together, in the order its first
    record came. Records of one id are one job only while each run was requeued (next_run):
    Slurm reuses job ids after a controller reset, and sacct -D shows the older jobs too."""
    by_id: dict[str, list[AccountingRecord]] = {}
    for rec in records:
        by_id.setdefault(rec.job_id, []).append(rec)
    jobs: list[list[AccountingRecord]] = []
    for recs in by_id.values():
        runs = sorted(recs, key=_run_order)
        jobs.append(runs[:1])
        for rec in runs[1:]:
            if next_run(jobs[-1][-1], rec):
                jobs[-1].append(rec)
            else:
                jobs.append([rec])
    return jobs


def next_run(prev: AccountingRecord, rec: AccountingRecord) -> bool:
    """Whether `rec`, of the same job id and submitted after `prev`, is the next run of prev's
    job rather than another job given the same id. A run ended by a requeue is REQUEUED; one
    ended by a preemption or a node failure that requeued the job is PREEMPTED or NODE_FAIL,
    as it is when the job was not requeued, so those count as requeued only when the next
    record was submitted (Slurm resets the submit time at a requeue, after the epilog) within
    REQUEUE_GAP_S of their end."""
    if prev.state is JobState.REQUEUED:
        return True
    if prev.state not in _REQUEUE_CAUSES or prev.end_time is None or rec.submit_time is None:
        return False
    return 0 <= rec.submit_time - prev.end_time <= REQUEUE_GAP_S


def _run_order(rec: AccountingRecord) -> tuple[bool, int]:
    begin = rec.submit_time if rec.submit_time is not None else rec.start_time
    return (begin is None, begin or 0)


def job_wait(runs: Sequence[AccountingRecord]) -> float | None:
    """Seconds one job spent queued: for each of its runs that started, start - submit (Slurm
    resets the submit time at a requeue, so a requeued job adds the time from the requeue to
    its next start). None when no run started."""
    waits = [float(max(r.start_time - r.submit_time, 0)) for r in runs
             if started(r) and r.start_time is not None and r.submit_time is not None]
    return sum(waits) if waits else None
