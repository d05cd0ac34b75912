"""The shares the daemon and the reports read from the real sacctmgr: a slurmdbd database that
serves a second cluster (a multi-cluster site: they are this cluster's, though sacctmgr lists
every cluster's associations, and an account of the same name there has another share), and a
user whose share is `parent`."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_hase.errors import SlurmError, SlurmUnavailableError
from slurm_hase.reports.window import stamp
from slurm_hase.slurm.command_backend import CommandBackend
from slurm_hase.slurm.localcluster.manager import LocalCluster
from tests.integration.ctld import slurmctld_stopped
from tests.integration.test_adapter_live import QUIET, wait_for
from tests.integration.test_preflight_live import _run as _schedd
from tests.integration.test_report_live import _hase
from tests.integration.test_report_review36_live import _done

pytestmark = pytest.mark.slurm
OTHER = "hase-other"  # a second cluster in the same database (it never runs)
OTHER_ACCOUNT = "hase-mc-only"  # an account that only the other cluster has


def _sacctmgr(env: dict[str, str], *args: str) -> None:
    res = subprocess.run(["sacctmgr", "-i", *args], env=env, capture_output=True, text=True,
                         timeout=60, check=False)
    assert res.returncode == 0, res.stderr


@pytest.fixture
def other_cluster(slurm_env: dict[str, str]) -> Iterator[None]:
    """The other cluster, with teama at share 5 (60 here) and an account of its own."""
    _sacctmgr(slurm_env, "add", "cluster", OTHER)
    try:
        _sacctmgr(slurm_env, "add", "account", "teama", f"cluster={OTHER}", "fairshare=5")
        _sacctmgr(slurm_env, "add", "account", OTHER_ACCOUNT, f"cluster={OTHER}",
                  "fairshare=99")
        yield
    finally:
        _sacctmgr(slurm_env, "delete", "cluster", OTHER)
        subprocess.run(["sacctmgr", "-i", "delete", "account", OTHER_ACCOUNT], env=slurm_env,
                       capture_output=True, text=True, timeout=60, check=False)


def test_shares_are_this_clusters_in_a_shared_database(
        slurm_backend: CommandBackend, slurm_env: dict[str, str], other_cluster: None) -> None:
    """Without a cluster named, the shares are this cluster's (ClusterName hase), not the
    other's teama (5) nor its own account; named, each cluster's own."""
    listed = subprocess.run(["sacctmgr", "show", "assoc", "format=cluster,account,share", "-P",
                             "-n"], env=slurm_env, capture_output=True, text=True, timeout=60,
                            check=True).stdout
    assert f"{OTHER}|teama|5" in listed.splitlines()  # sacctmgr itself lists both clusters
    fresh = CommandBackend(slurm_backend.runner)  # asks ClusterName afresh
    here = fresh.account_shares()
    assert fresh.cluster_name() == "hase"
    assert here == fresh.account_shares("hase")
    assert OTHER_ACCOUNT not in here and here["teama"] == 60.0
    assert fresh.account_shares(OTHER) == {"teama": 5.0, OTHER_ACCOUNT: 99.0, "root": 1.0}


def test_accounts_of_another_cluster_are_not_this_ones(
        slurm_backend: CommandBackend, slurm_env: dict[str, str], tmp_path: Path,
        other_cluster: None) -> None:
    """An account with associations on the other cluster only is not one of this cluster's
    accounts: the daemon's preflight warns that a [shares] entry for it is never used."""
    fresh = CommandBackend(slurm_backend.runner)
    assert OTHER_ACCOUNT not in fresh.accounts() and {"root", "teama"} <= fresh.accounts()
    assert OTHER_ACCOUNT in fresh.accounts(OTHER)
    res = _schedd(tmp_path, slurm_env, 'partitions = ["gpu"]\n',
                  f'[shares]\nteama = 2\n"{OTHER_ACCOUNT}" = 1\n')
    assert res.returncode == 0, res.stderr
    assert (f"hase: warning: [shares] {OTHER_ACCOUNT}: not an account in Slurm's associations "
            "(accounts: root, teama, teamb)") in res.stderr


def test_report_entitlement_in_a_shared_database(
        slurm_backend: CommandBackend, slurm_env: dict[str, str], jobs: list[str],
        other_cluster: None) -> None:
    """`hase report fairness` (no --cluster) gives teama this cluster's entitlement,
    60 / (60 + 40 + 1: root's own user), and no row for the other cluster's account."""
    job_id = slurm_backend.submit([*QUIET, "-A", "teama", "-J", "it-multicluster", "-G1",
                                   "--wrap", "sleep 1"], None)
    jobs.append(job_id)
    [rec] = wait_for("the job in sacct", lambda: _done(slurm_backend, job_id, 1), 120)
    span = ["--since", stamp((rec.submit_time or 0) - 5), "--until", stamp((rec.end_time or 0) + 5)]
    res = _hase(slurm_env, "report", "fairness", *span, "--json")
    assert res.returncode == 0, res.stderr
    rows = {row["account"]: row for row in json.loads(res.stdout)["accounts"]}
    assert OTHER_ACCOUNT not in rows
    # root's own user (share 1) is a sibling of teama and teamb, as in Slurm (session 42)
    assert rows["teama"]["entitlement"] == pytest.approx(60 / (60 + 40 + 1))


def test_shares_with_slurmctld_down(local_cluster: LocalCluster, slurm_env: dict[str, str],
                                    slurm_backend: CommandBackend) -> None:
    """slurmctld down (no ClusterName to ask): slurmdbd still gives the shares while it holds
    one cluster; with two, a SlurmError says to name one, and naming it works."""
    with slurmctld_stopped(local_cluster):
        down = CommandBackend(slurm_backend.runner)
        with pytest.raises(SlurmUnavailableError):
            down.cluster_name()
        assert down.account_shares() == {"teama": 60.0, "teamb": 40.0, "root": 1.0}
        _sacctmgr(slurm_env, "add", "cluster", OTHER)
        try:
            with pytest.raises(SlurmError, match=f"holds clusters hase, {OTHER} .*--cluster"):
                down.account_shares()
            assert down.account_shares("hase") == {"teama": 60.0, "teamb": 40.0, "root": 1.0}
        finally:
            _sacctmgr(slurm_env, "delete", "cluster", OTHER)


def test_a_user_whose_share_is_parent(slurm_backend: CommandBackend,
                                      slurm_env: dict[str, str]) -> None:
    """teama (60) gets a sub-account (3) beside its user root (1): teama's own jobs hold
    1 / (1 + 3) of its part. A `parent` user added to teama (sacctmgr lists
    `teama|NAME|parent`) is judged by all of teama's part, as sshare shows it: teama keeps 60."""
    _sacctmgr(slurm_env, "add", "account", "hase-sub", "parent=teama", "fairshare=3")
    try:
        _sacctmgr(slurm_env, "add", "user", "root", "account=hase-sub")
        assert slurm_backend.account_shares() == {"teama": 15.0, "hase-sub": 45.0,
                                                  "teamb": 40.0, "root": 1.0}
        _sacctmgr(slurm_env, "add", "user", "hase-parent-user", "account=teama",
                  "fairshare=parent")
        listed = subprocess.run(["sacctmgr", "show", "assoc", "format=account,user,share",
                                 "-P", "-n"], env=slurm_env, capture_output=True, text=True,
                                timeout=60, check=True).stdout
        assert "teama|hase-parent-user|parent" in listed.splitlines()
        assert slurm_backend.account_shares() == {"teama": 60.0, "hase-sub": 45.0,
                                                  "teamb": 40.0, "root": 1.0}
    finally:
        subprocess.run(["sacctmgr", "-i", "delete", "user", "hase-parent-user"], env=slurm_env,
                       capture_output=True, text=True, timeout=60, check=False)
        _sacctmgr(slurm_env, "delete", "account", "hase-sub")
