"""Plain-text tables for the usage and fairness reports."""

from __future__ import annotations

from collections.abc import Sequence

from slurm_hase.reports.fairness import FairnessReport, UsageRow
from slurm_hase.reports.jobs import shards_warning
from slurm_hase.reports.queue import cut_lists_warning


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    def line(cells: Sequence[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = [c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True)]
        return "  ".join([first, *rest]).rstrip()
    return [line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)]


def _wait(row: UsageRow) -> str:
    return "-" if row.mean_wait_s is None else f"{row.mean_wait_s:.0f}s"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _all_accounts(report: FairnessReport) -> str:
    """'all accounts, not only teamb' where --account limits the rows (the totals and Jain's
    index are still of every account), else ''."""
    if not report.only_accounts:
        return ""
    return f"all accounts, not only {', '.join(report.only_accounts)}"


def weights_note(report: FairnessReport) -> str:
    """"weights a100=1, t4=0.21; no weight given, counted as 1: mps"."""
    given = ", ".join(f"{t}={w:g}" for t, w in report.speed_weights.items()
                      if t not in report.defaulted_weights) or "-"
    note = f"weights {given}"
    if report.defaulted_weights:
        note += f"; no weight given, counted as 1: {', '.join(report.defaulted_weights)}"
    return note


def usage_table(report: FairnessReport, only_users: Sequence[str] = ()) -> str:
    """GPU-hours by type per account and per user; jobs, pending now, never started, mean wait.
    `only_users`: the users --user kept the rows of (the totals are still everyone's)."""
    types = report.gpu_types
    header = ["account/user", "jobs", "pending", "unstarted", *[f"{t} h" for t in types], "GPU h",
              "norm h", "wait"]
    rows: list[list[str]] = []
    for acct in report.accounts:
        members = [u for u in report.users if u.account == acct.account]
        for row, label in [(acct, acct.account), *((u, f"  {u.user}") for u in members)]:
            rows.append([label, str(row.jobs), str(row.pending_now), str(row.never_started),
                         *[f"{row.gpu_hours.get(t, 0.0):.3f}" for t in types],
                         f"{row.total_gpu_hours:.3f}", f"{row.norm_gpu_hours:.3f}", _wait(row)])
    lines = _table(header, rows)
    scope = (f"all accounts and users, not only {', '.join(only_users)} and their accounts"
             if only_users else _all_accounts(report))
    total = f"total of {scope}:" if scope else "total"
    lines += ["", "pending: PENDING now; unstarted: ended (cancelled, failed...) without running",
              f"{total} {report.total_gpu_hours:.3f} GPU-hours, "
              f"{report.total_norm_gpu_hours:.3f} normalised ({weights_note(report)})"]
    return "\n".join(lines + _cpu_only(report) + _cut_arrays(report) + _shards_whole(report))


def _cut_arrays(report: FairnessReport) -> list[str]:
    """The footer line on pending arrays whose task list Slurm cut ([] when none): `usage`
    prints no warnings of its own, and the job counts above are too low."""
    return [f"warning: {cut_lists_warning(report.cut_arrays)}"] if report.cut_arrays else []


def _shards_whole(report: FairnessReport) -> list[str]:
    """The footer line on shard jobs counted as whole GPUs ([] when none was)."""
    return ([f"warning: {shards_warning(report.shards_as_whole_gpus)}"]
            if report.shards_as_whole_gpus else [])


def _cpu_only(report: FairnessReport) -> list[str]:
    """The footer line on jobs left out for asking no GPU ([] when none was)."""
    n = report.cpu_only_jobs
    if not n:
        return []
    return [f"left out: {n} job{'s' if n != 1 else ''} that asked for no GPU (CPU only)"]


def fairness_table(report: FairnessReport) -> str:
    """Share of normalised GPU-hours vs entitlement per account, and Jain's index."""
    header = ["account", "jobs", "norm h", "share", "entitled", "ratio", "wait"]
    rows = [[r.account, str(r.jobs), f"{r.norm_gpu_hours:.3f}", _pct(r.share), _pct(r.entitlement),
             "-" if r.ratio is None else f"{r.ratio:.2f}", _wait(r)] for r in report.accounts]
    lines = _table(header, rows)
    jain = "-" if report.jain_index is None else f"{report.jain_index:.3f}"
    lines += ["", f"normalised GPU-hours: {weights_note(report)}",
              f"Jain's fairness index over {_all_accounts(report) or 'accounts'} "
              f"({report.jain_basis}): {jain}"]
    return "\n".join(lines + _cpu_only(report))
