"""Users directly under root (Slurm's default user root, or an admin) are siblings of root's
sub-accounts: Slurm divides every share at root's level by all of them, users included
(sshare on the local cluster: teama's NormShares 60/101 beside teamb's 40 and root's user's
1). The report now gives their part to the account `root`, so the denominators are Slurm's:
teama is entitled to 60/101 there, not 60%."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hase.reports.fairness import BY_RATIO, fairness_report
from slurm_hase.slurm.parse_shares import parse_sacctmgr_shares
from slurm_hase.slurm.types import AccountingRecord, JobState
from tests.conftest import slurm_capture

LOCALS = ["local-22.05", "local-24.11"]
# the reviewer's tree: root's own users root (1) and admin (50) beside teama 60 and teamb 40
ADMIN_TREE = ("root|||1\nroot||root|1\nroot||admin|50\nteama|root||60\nteama||alice|1\n"
              "teamb|root||40\nteamb||bob|1\n")


def _job(job_id: str, account: str, user: str) -> AccountingRecord:
    """One hour of one T4, as sacct gives a finished job."""
    return AccountingRecord(job_id, "j", account, user, JobState.COMPLETED, submit_time=0,
                            start_time=0, end_time=3600, elapsed_s=3600,
                            alloc_gpus={"t4": 1}, nodes="t4-1")


@pytest.mark.parametrize("local", LOCALS)
def test_the_local_clusters_root_user_takes_its_part(fixtures_dir: Path, local: str) -> None:
    shares = parse_sacctmgr_shares(slurm_capture(fixtures_dir, local, "sacctmgr-shares.txt"))
    assert shares == {"root": 1.0, "teama": 60.0, "teamb": 40.0}
    rep = fairness_report([_job("1", "teama", "alice"), _job("2", "teamb", "bob")],
                          shares=shares)
    rows = {r.account: r for r in rep.accounts}
    assert rows["teama"].entitlement == pytest.approx(60 / 101)
    assert rows["teamb"].entitlement == pytest.approx(40 / 101)
    assert rows["teama"].ratio == pytest.approx(0.5 / (60 / 101))


def test_root_users_jobs_have_an_entitlement_and_enter_jains_index() -> None:
    shares = parse_sacctmgr_shares(ADMIN_TREE)
    assert shares == {"root": 51.0, "teama": 60.0, "teamb": 40.0}
    rep = fairness_report([_job("1", "teama", "alice"), _job("2", "teamb", "bob"),
                           _job("3", "root", "admin")], shares=shares)
    rows = {r.account: r for r in rep.accounts}
    assert rows["teama"].entitlement == pytest.approx(60 / 151)  # was 0.6
    assert rows["teamb"].entitlement == pytest.approx(40 / 151)
    assert rows["root"].entitlement == pytest.approx(51 / 151)  # was 0, left out of the index
    ratios = [1 / 3 / (s / 151) for s in (51, 60, 40)]
    assert rep.jain_basis == BY_RATIO
    assert rep.jain_index == pytest.approx(sum(ratios) ** 2 / (3 * sum(r * r for r in ratios)))
    assert rep.warnings == []  # root is no longer "jobs but no share"


@pytest.mark.parametrize("local", LOCALS)
def test_the_tree_is_the_docs_example(fixtures_dir: Path, local: str) -> None:
    """docs/reports.md: physa holds 1 x 3/5 = 0.6 of root's 102 (root's user 1, physics 1,
    teama 60, teamb 40), physics' own users 0.4; physa's entitlement is 0.6/102."""
    shares = parse_sacctmgr_shares(slurm_capture(fixtures_dir, local,
                                                 "sacctmgr-shares-tree.txt"))
    assert shares == pytest.approx({"root": 1.0, "physics": 0.4, "physa": 0.6, "teama": 60.0,
                                    "teamb": 40.0})
    assert sum(shares.values()) == pytest.approx(102)
    rep = fairness_report([_job("1", "physa", "alice"), _job("2", "teama", "alice")],
                          shares=shares)
    rows = {r.account: r for r in rep.accounts}
    assert rows["physa"].entitlement == pytest.approx(0.6 / 102)
    assert rows["teama"].entitlement == pytest.approx(60 / 102)


def test_root_without_users_stays_out() -> None:
    assert parse_sacctmgr_shares("root|||1\nteama|root||60\nteama||alice|1\n"
                                 "teamb|root||40\n") == {"teama": 60.0, "teamb": 40.0}
    # a share of 0 for root's user: no part, as before
    assert parse_sacctmgr_shares("root|||1\nroot||root|0\nteama|root||60\n") == {"teama": 60.0}


def test_a_parent_account_under_root_counts_beside_root_users() -> None:
    """x (share `parent`) under root: its user's 5 competes at root's level too, beside
    root's user (1), teama (60) and teamb (40): the shares sum to root's 106."""
    shares = parse_sacctmgr_shares("root|||1\nroot||root|1\nteama|root||60\nteamb|root||40\n"
                                   "x|root||parent\nx||xavier|5\n")
    assert shares == {"root": 1.0, "teama": 60.0, "teamb": 40.0, "x": 5.0}
