"""Per-account and per-user GPU usage, normalised usage, shares vs entitlement, Jain's index.

Pure functions over AccountingRecord lists. A job's GPU time is its allocated GPUs (by type)
times its run time, clipped to the report window when one is given; an MPS job counts its
share as a fraction of one GPU (``gres/mps=50`` = half a GPU with 100 shares per GPU).

A requeued job is one record per run (``sacct -D``, and ``sacct --json`` always): every run's
GPU time counts, the job counts once, and its wait is the time it spent queued before its runs
(see ``job_wait``). Another job that got the same id (Slurm reuses ids after a controller reset)
counts apart (see ``job_runs``); each component of a heterogeneous job (``123+0``, ``123+1``)
and each array task (``123_4``) is a job of its own, with its own id.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from slurm_hase.errors import ConfigError
from slurm_hase.reports.queue import array_tasks
from slurm_hase.slurm import hostlist
from slurm_hase.slurm.tres import gpus_from_tres, mps_from_tres
from slurm_hase.slurm.types import AccountingRecord, JobState, Node

UNTYPED = "untyped"  # GPUs allocated without a type
MPS_UNKNOWN = "mps"  # MPS share on a node whose GPU type is unknown
BY_RATIO = "share/entitlement"
BY_HOURS = "normalised GPU-hours"
_RUNNING = frozenset({JobState.RUNNING, JobState.SUSPENDED, JobState.COMPLETING})
_REQUEUE_CAUSES = frozenset({JobState.PREEMPTED, JobState.NODE_FAIL})
_V = TypeVar("_V")
REQUEUE_GAP_S = 600  # most seconds from a run's end to the requeued job's next submit time


def job_gpus(rec: AccountingRecord, node_types: Mapping[str, str] | None = None,
             mps_per_gpu: int = 100, node_mps: Mapping[str, int] | None = None
             ) -> dict[str, float]:
    """GPUs held by one job, by type (fractional for MPS: the job's mps count over the MPS
    count of one GPU of its node, `node_mps`, else `mps_per_gpu`)."""
    out: dict[str, float] = {}
    for gpu_type, count in rec.alloc_gpus.items():
        key = gpu_type or UNTYPED
        out[key] = out.get(key, 0.0) + float(count)
    mps = mps_from_tres(rec.alloc_tres)
    if mps > 0 and not rec.alloc_gpus:
        key = _same_on_all(rec.nodes, node_types or {}) or MPS_UNKNOWN
        per_gpu = _same_on_all(rec.nodes, node_mps or {}) or mps_per_gpu
        out[key] = out.get(key, 0.0) + mps / float(per_gpu)
    return out


def cpu_only(rec: AccountingRecord) -> bool:
    """Whether a job is known to have asked for and held no GPU nor MPS share: its ReqTRES or
    AllocTRES is there and names neither. Such a job is no part of a GPU report (a CPU-only
    account would sit at 0 in Jain's index as if starved of GPUs); a record without either
    (an squeue job sacct does not have) cannot tell and is kept."""
    if rec.alloc_gpus or not (rec.req_tres or rec.alloc_tres):
        return False
    return not any(gpus_from_tres(t) or mps_from_tres(t) for t in (rec.req_tres, rec.alloc_tres))


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
    if rec.state in _RUNNING:
        return True
    return rec.start_time is not None and (rec.elapsed_s > 0 or bool(rec.nodes) or bool(rec.alloc_gpus))


def run_seconds(rec: AccountingRecord, window: tuple[int, int] | None = None) -> float:
    """Seconds the job held its allocation (start to end; a job still running: its elapsed
    time), clipped to window=(start, end) epoch seconds when given. Time suspended counts, as
    the GPUs stay allocated, with a window or without (Elapsed leaves it out)."""
    if rec.start_time is None:
        return 0.0
    end = rec.end_time if rec.end_time is not None else rec.start_time + max(rec.elapsed_s, 0)
    lo, hi = ((rec.start_time, end) if window is None
              else (max(rec.start_time, window[0]), min(end, window[1])))
    return float(max(hi - lo, 0))


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


def jain_index(values: Sequence[float]) -> float | None:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1 = equal, 1/n = one takes all."""
    if not values:
        return None
    square_sum = sum(v * v for v in values)
    if square_sum == 0:
        return 1.0
    return sum(values) ** 2 / (len(values) * square_sum)


@dataclass
class UsageRow:
    """Usage of one account (user None) or one user within an account."""

    account: str
    user: str | None = None
    jobs: int = 0
    pending_now: int = 0  # state PENDING
    never_started: int = 0  # ended (cancelled, failed...) without ever running
    gpu_hours: dict[str, float] = field(default_factory=dict)  # by GPU type
    norm_gpu_hours: float = 0.0
    share: float = 0.0  # of all normalised GPU-hours in the report
    entitlement: float | None = None  # normalised sacctmgr shares (accounts only)
    ratio: float | None = None  # share / entitlement
    mean_wait_s: float | None = None  # submit -> start, over jobs that started
    _waits: list[float] = field(default_factory=list, repr=False)

    @property
    def total_gpu_hours(self) -> float:
        return sum(self.gpu_hours.values())

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready view (hours rounded to 1e-6)."""
        d = asdict(self)
        d.pop("_waits")
        d["gpu_hours"] = {k: round(v, 6) for k, v in sorted(self.gpu_hours.items())}
        d["total_gpu_hours"] = round(self.total_gpu_hours, 6)
        d["norm_gpu_hours"] = round(self.norm_gpu_hours, 6)
        if self.user is None:
            d.pop("user")
        return d


@dataclass
class FairnessReport:
    """The whole report: rows per account and per user, totals, Jain's index over accounts."""

    accounts: list[UsageRow]
    users: list[UsageRow]
    gpu_types: list[str]
    speed_weights: dict[str, float]
    total_gpu_hours: float
    total_norm_gpu_hours: float
    jain_index: float | None
    jain_basis: str  # BY_RATIO or BY_HOURS
    window: tuple[int, int] | None = None
    defaulted_weights: list[str] = field(default_factory=list)  # types weighed 1.0 for lack of a weight
    warnings: list[str] = field(default_factory=list)  # e.g. why Jain's index fell back to BY_HOURS
    only_accounts: list[str] = field(default_factory=list)  # rows shown (only_accounts); [] = all
    only_users: list[str] = field(default_factory=list)  # users shown (only_users); [] = all
    cpu_only_jobs: int = 0  # jobs left out: they asked for no GPU (cpu_only)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready view."""
        return {
            "window": list(self.window) if self.window else None,
            "gpu_types": self.gpu_types,
            "speed_weights": self.speed_weights,
            "defaulted_weights": self.defaulted_weights,
            "total_gpu_hours": round(self.total_gpu_hours, 6),
            "total_norm_gpu_hours": round(self.total_norm_gpu_hours, 6),
            "jain_index": None if self.jain_index is None else round(self.jain_index, 6),
            "jain_basis": self.jain_basis,
            "accounts": [r.as_dict() for r in self.accounts],
            "users": [r.as_dict() for r in self.users],
            "warnings": self.warnings,
            "only_accounts": self.only_accounts,
            "only_users": self.only_users,
            "cpu_only_jobs": self.cpu_only_jobs,
        }


def _add(row: UsageRow, runs: Sequence[AccountingRecord], hours: Mapping[str, float],
         weights: Mapping[str, float]) -> None:
    """Add one job (all its runs) to a row: one job (a pending array: its tasks), the GPU-hours
    of every run."""
    count = max(array_tasks(r.job_id) for r in runs)
    row.jobs += count
    if any(r.state is JobState.PENDING for r in runs):
        row.pending_now += count
    elif not any(started(r) for r in runs):
        row.never_started += count
    elif (wait := job_wait(runs)) is not None:
        row._waits.append(wait)
    for gpu_type, h in hours.items():
        row.gpu_hours[gpu_type] = row.gpu_hours.get(gpu_type, 0.0) + h
        row.norm_gpu_hours += h * weights.get(gpu_type, 1.0)


def _entitlements(accounts: Mapping[str, UsageRow], shares: Mapping[str, float]) -> list[str]:
    """Set entitlement and ratio on each account row; warnings when no account is entitled."""
    bad = sorted(a for a, v in shares.items() if v < 0)
    if bad:
        raise ConfigError(f"negative share for account {bad[0]!r}: {shares[bad[0]]:g} (shares must be >= 0)")
    share_total = sum(shares.values())
    for row in accounts.values():
        row.entitlement = shares.get(row.account, 0.0) / share_total if share_total else 0.0
        row.ratio = row.share / row.entitlement if row.entitlement else None
    if not accounts or any(row.entitlement for row in accounts.values()):
        return []
    given = ", ".join(f"{a}={v:g}" for a, v in sorted(shares.items())) or "none"
    have = ", ".join(sorted(accounts))
    problem = ("the shares match no account in the report" if not set(shares) & set(accounts)
               else "no account in the report has a positive share")
    return [f"{problem} (shares: {given}; accounts with jobs: {have}); "
            f"Jain's index uses {BY_HOURS} instead"]


def _unentitled_use(accounts: Mapping[str, UsageRow], used: Sequence[str]) -> str:
    """The warning for accounts with GPU time but no share: Jain's index (over ratios) cannot
    see them, so a 0-share account taking most GPUs leaves it at 1.000."""
    total = 100 * sum(accounts[a].share for a in used)
    which = "which has" if len(used) == 1 else "which have"
    return (f"Jain's index leaves out {', '.join(used)}, {which} jobs but no share and used "
            f"{total:.1f}% of the normalised GPU-hours: the index does not show that use")


def fairness_report(
    records: Iterable[AccountingRecord],
    *,
    speed_weights: Mapping[str, float] | None = None,
    shares: Mapping[str, float] | None = None,
    node_types: Mapping[str, str] | None = None,
    window: tuple[int, int] | None = None,
    mps_per_gpu: int = 100,
    guess_from: Iterable[AccountingRecord] | None = None,
    node_mps: Mapping[str, int] | None = None,
) -> FairnessReport:
    """Build the report. speed_weights: GPU type -> relative speed (missing = 1.0, listed in
    defaulted_weights). shares: account -> raw fair-share (sacctmgr, >= 0, else ConfigError);
    accounts missing from it get entitlement 0 and stay out of Jain's index, which is taken over
    accounts with jobs in the records; when none of them is entitled it falls back to
    normalised GPU-hours, with a warning. Node GPU types not in `node_types` are guessed from
    `guess_from` (default: the records), so that a caller who selects records can guess from
    all of them. Records of one job id are the runs of one job, unless Slurm reused the id
    (see job_runs)."""
    recs = list(records)
    weights = dict(speed_weights or {})
    guessed = guess_node_types(recs if guess_from is None else guess_from)
    types_by_node = {**guessed, **(node_types or {})}
    accounts: dict[str, UsageRow] = {}
    users: dict[tuple[str, str], UsageRow] = {}
    # one job per (account, user, job id): a job whose account was changed between runs counts
    # in each account it ran in, with the GPU time of its runs there
    n_cpu_only = 0
    for runs in job_runs(recs):
        if all(cpu_only(r) for r in runs):
            n_cpu_only += max(array_tasks(r.job_id) for r in runs)
            continue
        for (account, user_name), mine in _by_owner(runs).items():
            hours: dict[str, float] = {}
            for rec in mine:
                secs = run_seconds(rec, window)
                for t, n in job_gpus(rec, types_by_node, mps_per_gpu, node_mps).items():
                    hours[t] = hours.get(t, 0.0) + n * secs / 3600.0
            acct = accounts.setdefault(account, UsageRow(account=account))
            user = users.setdefault((account, user_name), UsageRow(account=account, user=user_name))
            _add(acct, mine, hours, weights)
            _add(user, mine, hours, weights)
    total_norm = sum(r.norm_gpu_hours for r in accounts.values())
    for row in [*accounts.values(), *users.values()]:
        row.share = row.norm_gpu_hours / total_norm if total_norm > 0 else 0.0
        row.mean_wait_s = sum(row._waits) / len(row._waits) if row._waits else None
    warnings = _entitlements(accounts, shares) if shares is not None else []
    if shares is not None and not warnings:
        basis = BY_RATIO
        values = [r.ratio for r in accounts.values() if r.ratio is not None]
        left_out = sorted(a for a, r in accounts.items() if r.ratio is None)
        if len(values) == 1 and left_out:  # an index over one value is 1 whatever it is
            warnings.append(f"Jain's index is taken over one account only: "
                            f"{', '.join(left_out)} {'has' if len(left_out) == 1 else 'have'} "
                            f"jobs but no share, so the 1.000 says nothing of fairness")
        elif used := [a for a in left_out if accounts[a].share > 0]:
            warnings.append(_unentitled_use(accounts, used))
    else:
        basis = BY_HOURS
        values = [r.norm_gpu_hours for r in accounts.values()]
    types = sorted({t for r in accounts.values() for t in r.gpu_hours})
    return FairnessReport(
        accounts=sorted(accounts.values(), key=lambda r: r.account),
        users=sorted(users.values(), key=lambda r: (r.account, r.user or "")),
        gpu_types=types,
        speed_weights={t: weights.get(t, 1.0) for t in types},
        total_gpu_hours=sum(r.total_gpu_hours for r in accounts.values()),
        total_norm_gpu_hours=total_norm,
        jain_index=jain_index(values),
        jain_basis=basis,
        window=window,
        defaulted_weights=[t for t in types if t not in weights],
        warnings=warnings,
        cpu_only_jobs=n_cpu_only,
    )


def _by_owner(runs: Sequence[AccountingRecord]) -> dict[tuple[str, str], list[AccountingRecord]]:
    out: dict[tuple[str, str], list[AccountingRecord]] = {}
    for rec in runs:
        out.setdefault((rec.account, rec.user), []).append(rec)
    return out
