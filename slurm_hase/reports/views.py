"""A fairness report narrowed to what one reader asked for (--account, --user)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from slurm_hase.reports.fairness import FairnessReport


def only_accounts(report: FairnessReport, accounts: Iterable[str]) -> FairnessReport:
    """The report limited to some accounts' rows (and their users' rows). Everything else is
    still of every account in the report: each row's share of all normalised GPU-hours, its
    entitlement among all accounts' shares, the totals and Jain's index over all accounts."""
    wanted = set(accounts)
    return replace(report, accounts=[a for a in report.accounts if a.account in wanted],
                   users=[u for u in report.users if u.account in wanted],
                   only_accounts=sorted(wanted))


def only_users(report: FairnessReport, users: Iterable[str]) -> FairnessReport:
    """The report as one user (or a few) sees it: their own rows, and the rows of the accounts
    they ran jobs in, which still count every user's jobs (their share of the account)."""
    wanted = set(users)
    mine = [u for u in report.users if u.user in wanted]
    accounts = {u.account for u in mine}
    return replace(report, users=mine, accounts=[a for a in report.accounts
                                                  if a.account in accounts],
                   only_users=sorted(wanted))
