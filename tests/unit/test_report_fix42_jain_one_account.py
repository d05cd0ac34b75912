"""Jain's index over one account reads 1.000 whatever that account got: the report says so
whenever fewer than two accounts enter it, not only when others were left out for having no
share (shares teama=1, teamb=1 with only teamb's jobs read 1.000 without a word)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hase.reports.fairness import BY_HOURS, BY_RATIO, fairness_report
from slurm_hase.slurm.parse_sacct_text import parse_sacct_parsable
from slurm_hase.slurm.types import AccountingRecord
from tests.conftest import slurm_capture

pytestmark = pytest.mark.usefixtures("utc")

ONE_ACCOUNT = ("Jain's index is taken over one account only: teamb is the only account with "
               "jobs, so the 1.000 says nothing of fairness")


def _captured(fixtures_dir: Path) -> list[AccountingRecord]:
    """The real 24.11 sacct -P capture: teama's and teamb's jobs."""
    return parse_sacct_parsable(slurm_capture(fixtures_dir, "24.11", "sacct-parsable.txt"))


def _teamb_only(fixtures_dir: Path) -> list[AccountingRecord]:
    return [r for r in _captured(fixtures_dir) if r.account == "teamb"]


def test_one_entitled_account_with_jobs_is_said(fixtures_dir: Path) -> None:
    """The reviewer's case: both accounts have a share, only teamb ran jobs."""
    rep = fairness_report(_teamb_only(fixtures_dir), shares={"teama": 1, "teamb": 1})
    [teamb] = rep.accounts
    assert (teamb.account, teamb.entitlement, teamb.ratio) == ("teamb", 0.5, 2.0)
    assert rep.jain_basis == BY_RATIO and rep.jain_index == 1.0
    assert rep.warnings == [ONE_ACCOUNT]
    assert rep.as_dict()["warnings"] == [ONE_ACCOUNT]


def test_one_account_over_normalised_hours_is_said_too(fixtures_dir: Path) -> None:
    """No shares (sacctmgr failed, or a saved file without --shares): the index is over
    normalised GPU-hours, still of one value."""
    rep = fairness_report(_teamb_only(fixtures_dir))
    assert rep.jain_basis == BY_HOURS and rep.jain_index == 1.0
    assert rep.warnings == [ONE_ACCOUNT]


def test_shares_matching_no_account_and_one_account_give_both_warnings(
        fixtures_dir: Path) -> None:
    rep = fairness_report(_teamb_only(fixtures_dir), shares={"teamz": 1})
    assert rep.jain_basis == BY_HOURS
    assert rep.warnings[0].startswith("the shares match no account in the report")
    assert rep.warnings[1:] == [ONE_ACCOUNT]


def test_left_out_accounts_keep_their_wording(fixtures_dir: Path) -> None:
    """teama has jobs but no share: the warning names it, as before."""
    rep = fairness_report(_captured(fixtures_dir), shares={"teamb": 1})
    assert rep.jain_index == 1.0
    assert rep.warnings == ["Jain's index is taken over one account only: teama has jobs but "
                            "no share, so the 1.000 says nothing of fairness"]


def test_two_accounts_in_the_index_give_no_such_warning(fixtures_dir: Path) -> None:
    rep = fairness_report(_captured(fixtures_dir), shares={"teama": 1, "teamb": 1})
    assert rep.jain_index is not None and rep.jain_index < 1.0
    assert rep.warnings == []
    assert fairness_report(_captured(fixtures_dir)).warnings == []


def test_no_jobs_no_index_no_warning() -> None:
    rep = fairness_report([], shares={"teama": 1})
    assert rep.jain_index is None and rep.warnings == []
