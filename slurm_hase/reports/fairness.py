"""Per-account and per-user GPU usage, normalised usage, shares vs entitlement, Jain's index.

Pure functions over AccountingRecord lists. A job's GPU time is its allocated GPUs (by type)
times its run time, clipped to the report window when one is given; an MPS job counts its
share as a fraction of one GPU (``gres/mps=50`` = half a GPU with 100 shares per GPU), a job
on GPU shards likewise (``gres/shard=4`` = half a GPU on a node with 8 shards per GPU).

A requeued job is one record per run (``sacct -D``, and ``sacct --json`` always): every run's
GPU time counts, the job counts once, and its wait is the time it spent queued before its runs
(see ``job_wait``). Another job that got the same id (Slurm reuses ids after a controller reset)
counts apart (see ``job_runs``); each component of a heterogeneous job (``123+0``, ``123+1``)
and each array task (``123_4``) is a job of its own, with its own id. The per-job facts
(GPUs held, run time, which records are one job) are jobs.py's, named here too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from slurm_hase.errors import ConfigError
from slurm_hase.reports.jobs import (
    MPS_UNKNOWN,
    REQUEUE_GAP_S,
    SHARD_UNKNOWN,
    UNTYPED,
    cpu_only,
    guess_node_types,
    job_gpus,
    job_runs,
    job_wait,
    next_run,
    node_gpu_types,
    run_seconds,
    shards_per_gpu_unknown,
    shards_warning,
    started,
)
from slurm_hase.reports.queue import array_list_cut, array_tasks, cut_lists_warning
from slurm_hase.slurm.types import AccountingRecord, JobState

# the per-job helpers live in jobs.py; named here too, where callers have always found them
__all__ = [
    "BY_HOURS", "BY_RATIO", "MPS_UNKNOWN", "REQUEUE_GAP_S", "SHARD_UNKNOWN", "UNTYPED",
    "FairnessReport", "UsageRow", "cpu_only", "fairness_report", "guess_node_types",
    "jain_index", "job_gpus", "job_runs", "job_wait", "next_run", "node_gpu_types",
    "run_seconds", "started",
]

BY_RATIO = "share/entitlement"
BY_HOURS = "normalised GPU-hours"


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
    cut_arrays: list[str] = field(default_factory=list)  # pending arrays Slurm cut the task list of
    # shard jobs counted as a whole GPU a node: their nodes' shard count per GPU is unknown
    shards_as_whole_gpus: list[str] = field(default_factory=list)

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
            "cut_arrays": self.cut_arrays,
            "shards_as_whole_gpus": self.shards_as_whole_gpus,
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


def _one_account(only: str, left_out: Sequence[str]) -> str:
    """The warning for an index over one account: 1.000 whatever that account got."""
    why = (f"{', '.join(left_out)} {'has' if len(left_out) == 1 else 'have'} jobs but no share"
           if left_out else f"{only} is the only account with jobs")
    return f"Jain's index is taken over one account only: {why}, so the 1.000 says nothing of fairness"


def _jain(accounts: Mapping[str, UsageRow], shares: Mapping[str, float] | None
          ) -> tuple[float | None, str, list[str]]:
    """Jain's index over the accounts with jobs, its basis, and the warnings on what it can
    and cannot show: over ratios when the shares entitle one of them at least (those with no
    entitlement left out), else over normalised GPU-hours."""
    warnings = _entitlements(accounts, shares) if shares is not None else []
    if shares is not None and not warnings:
        entered = {a: r.ratio for a, r in accounts.items() if r.ratio is not None}
        left_out = sorted(a for a in accounts if a not in entered)
        if used := [a for a in left_out if accounts[a].share > 0 and len(entered) > 1]:
            warnings.append(_unentitled_use(accounts, used))
        basis, values = BY_RATIO, entered
    else:
        left_out = []
        basis, values = BY_HOURS, {a: r.norm_gpu_hours for a, r in accounts.items()}
    if len(values) == 1:  # an index over one value is 1 whatever it is
        warnings.append(_one_account(next(iter(values)), left_out))
    return jain_index(list(values.values())), basis, warnings


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
    queried_at: float | None = None,
    node_shards: Mapping[str, float] | None = None,
) -> FairnessReport:
    """Build the report. speed_weights: GPU type -> relative speed (missing = 1.0, listed in
    defaulted_weights). shares: account -> raw fair-share (sacctmgr, >= 0, else ConfigError);
    accounts missing from it get entitlement 0 and stay out of Jain's index, which is taken over
    accounts with jobs in the records; when none of them is entitled it falls back to
    normalised GPU-hours, with a warning (so is an index over one account). Node GPU types not
    in `node_types` are guessed from `guess_from` (default: the records), so that a caller who
    selects records can guess from all of them. Records of one job id are the runs of one job,
    unless Slurm reused the id (see job_runs). queried_at: when the records were asked for
    (epoch s), where a job still running stops counting (run_seconds); None for a saved file.
    node_shards: node -> shard count of one of its GPUs (a shard job counts its part of a GPU;
    on a node not in it, a whole GPU, with a warning)."""
    recs = list(records)
    weights = dict(speed_weights or {})
    guessed = guess_node_types(recs if guess_from is None else guess_from)
    types_by_node = {**guessed, **(node_types or {})}
    accounts: dict[str, UsageRow] = {}
    users: dict[tuple[str, str], UsageRow] = {}
    # one job per (account, user, job id): a job whose account was changed between runs counts
    # in each account it ran in, with the GPU time of its runs there
    n_cpu_only = 0
    shards_unknown: set[str] = set()
    for runs in job_runs(recs):
        if all(cpu_only(r) for r in runs):
            n_cpu_only += max(array_tasks(r.job_id) for r in runs)
            continue
        for (account, user_name), mine in _by_owner(runs).items():
            hours: dict[str, float] = {}
            for rec in mine:
                secs = run_seconds(rec, window, queried_at)
                for t, n in job_gpus(rec, types_by_node, mps_per_gpu, node_mps,
                                     node_shards).items():
                    hours[t] = hours.get(t, 0.0) + n * secs / 3600.0
                if secs > 0 and shards_per_gpu_unknown(rec, node_shards):
                    shards_unknown.add(rec.job_id)
            acct = accounts.setdefault(account, UsageRow(account=account))
            user = users.setdefault((account, user_name), UsageRow(account=account, user=user_name))
            _add(acct, mine, hours, weights)
            _add(user, mine, hours, weights)
    total_norm = sum(r.norm_gpu_hours for r in accounts.values())
    for row in [*accounts.values(), *users.values()]:
        row.share = row.norm_gpu_hours / total_norm if total_norm > 0 else 0.0
        row.mean_wait_s = sum(row._waits) / len(row._waits) if row._waits else None
    index, basis, warnings = _jain(accounts, shares)
    cut = sorted({r.job_id for r in recs if array_list_cut(r.job_id)})
    if cut:
        warnings.append(cut_lists_warning(cut))
    whole = sorted(shards_unknown, key=lambda j: (len(j), j))
    if whole:
        warnings.append(shards_warning(whole))
    types = sorted({t for r in accounts.values() for t in r.gpu_hours})
    return FairnessReport(
        accounts=sorted(accounts.values(), key=lambda r: r.account),
        users=sorted(users.values(), key=lambda r: (r.account, r.user or "")),
        gpu_types=types,
        speed_weights={t: weights.get(t, 1.0) for t in types},
        total_gpu_hours=sum(r.total_gpu_hours for r in accounts.values()),
        total_norm_gpu_hours=total_norm,
        jain_index=index,
        jain_basis=basis,
        window=window,
        defaulted_weights=[t for t in types if t not in weights],
        warnings=warnings,
        cpu_only_jobs=n_cpu_only,
        cut_arrays=cut,
        shards_as_whole_gpus=whole,
    )


def _by_owner(runs: Sequence[AccountingRecord]) -> dict[tuple[str, str], list[AccountingRecord]]:
    out: dict[tuple[str, str], list[AccountingRecord]] = {}
    for rec in runs:
        out.setdefault((rec.account, rec.user), []).append(rec)
    return out
