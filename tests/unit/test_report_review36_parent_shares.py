"""Accounts whose fairshare is `parent` (sacctmgr(1): the account's children are "effectively
reparented for fairshare calculations to the first parent of their parent that is not
Fairshare=parent"): their users compete in that account's pool, so the report gives the
`parent` account the part its users hold there, and its sub-accounts their part of that pool,
rather than leaving them out of the shares (no entitlement, out of Jain's index)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hase.reports.fairness import BY_RATIO, fairness_report
from slurm_hase.slurm.parse_shares import parse_sacctmgr_shares
from slurm_hase.slurm.types import AccountingRecord, JobState

LOCAL = "local-22.05"


def _tree(fixtures_dir: Path, local: str = LOCAL) -> str:
    """capture-local.sh's tree: physics (1) under root holding its user root (2), physa (3)
    and physb (share `parent`, no users), beside teama (60), teamb (40) and root's user (1)."""
    return (fixtures_dir / "slurm" / local / "sacctmgr-shares-tree.txt").read_text()


@pytest.mark.parametrize("local", ["local-22.05", "local-24.11"])
def test_users_of_a_parent_account_share_its_parents_pool(fixtures_dir: Path, local: str) -> None:
    """bob (2) in physb competes beside physics' user (2) and physa (3): physics' part (1 of
    root's) splits 2:3:2 over physics, physa and physb."""
    shares = parse_sacctmgr_shares(_tree(fixtures_dir, local) + "physb||bob|2\n")
    assert shares == pytest.approx({"root": 1.0, "physics": 2 / 7, "physa": 3 / 7,
                                    "physb": 2 / 7, "teama": 60.0, "teamb": 40.0})


def test_parent_account_without_users_stays_out(fixtures_dir: Path) -> None:
    """The captured physb has no users: nothing to hold, the shares as before."""
    assert parse_sacctmgr_shares(_tree(fixtures_dir)) == pytest.approx(
        {"root": 1.0, "physics": 0.4, "physa": 0.6, "teama": 60.0, "teamb": 40.0})


def test_sub_account_of_a_parent_account_is_reparented(fixtures_dir: Path) -> None:
    """physc (4) under physb (`parent`) competes beside physa (3) and physics' user (2); it was
    left out, its parent having no share of its own."""
    shares = parse_sacctmgr_shares(_tree(fixtures_dir) + "physc|physb||4\nphysc||carol|1\n")
    assert shares == pytest.approx({"root": 1.0, "physics": 2 / 9, "physa": 3 / 9,
                                    "physc": 4 / 9, "teama": 60.0, "teamb": 40.0})


def test_parent_chain_and_top_level_parent_account() -> None:
    """x (`parent`) under y (`parent`) under root: x's user (5) competes beside teama (60) and
    teamb (40) and root's user (1) directly, x holding 5 of root's shares; a loop of `parent`
    accounts is left out."""
    raw = ("root|||1\nroot||root|1\nteama|root||60\nteama||alice|1\nteamb|root||40\n"
           "y|root||parent\nx|y||parent\nx||xavier|5\n"
           "p|q||parent\nq|p||parent\np||pat|1\n")
    assert parse_sacctmgr_shares(raw) == pytest.approx({"root": 1.0, "teama": 60.0,
                                                        "teamb": 40.0, "x": 5.0})


def _job(job_id: str, account: str, user: str) -> AccountingRecord:
    return AccountingRecord(job_id, "j", account, user, JobState.COMPLETED, submit_time=0,
                            start_time=0, end_time=3600, elapsed_s=3600, alloc_gpus={"t4": 1},
                            nodes="t4-1")


def test_parent_accounts_jobs_count_against_an_entitlement(fixtures_dir: Path) -> None:
    """A GPU-hour each in physb (bob) and teama: physb's row has the entitlement of its user
    (2/7 of physics' 1) and is in Jain's index, which is no longer of teama alone."""
    shares = parse_sacctmgr_shares(_tree(fixtures_dir) + "physb||bob|2\n")
    rep = fairness_report([_job("1", "physb", "bob"), _job("2", "teama", "alice")],
                          shares=shares, speed_weights={"t4": 1.0})
    rows = {r.account: r for r in rep.accounts}
    total = 1 + 2 / 7 + 3 / 7 + 2 / 7 + 60 + 40  # root's own user's 1 too
    assert rows["physb"].entitlement == pytest.approx((2 / 7) / total)
    assert rows["physb"].ratio == pytest.approx(0.5 / ((2 / 7) / total))
    assert rep.jain_basis == BY_RATIO and rep.warnings == []
    assert rep.jain_index is not None and rep.jain_index < 0.6


def test_a_user_whose_share_is_parent_holds_the_accounts_whole_part(fixtures_dir: Path) -> None:
    """dave's share is `parent` (sacctmgr shows `physics||dave|parent`; on the local 22.05
    cluster sshare gave such a user its account's NormShares): physics' jobs are judged by all
    of physics' part (1), not the 2 / (2 + 3) that its numeric user holds beside physa."""
    shares = parse_sacctmgr_shares(_tree(fixtures_dir) + "physics||dave|parent\n")
    assert shares == pytest.approx({"root": 1.0, "physics": 1.0, "physa": 0.6,
                                    "teama": 60.0, "teamb": 40.0})
    # an account whose only user is `parent` beside a sub-account: its part, not 0
    raw = ("root|||1\nteama|root||60\nteama||alice|parent\nsub|teama||3\nsub||bob|1\n"
           "teamb|root||40\nteamb||carl|1\n")
    assert parse_sacctmgr_shares(raw) == pytest.approx({"teama": 60.0, "sub": 60.0,
                                                        "teamb": 40.0})
