"""A cluster folder made by other Slurm or MariaDB releases (an OS upgrade, a copied folder) is
refused before any daemon starts, with the releases named; the headers are real ones, written
by Debian 12's Slurm 22.05 / MariaDB 10.11 and Debian 13's Slurm 24.11 / MariaDB 11.8."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from slurm_hase.errors import ClusterError
from slurm_hase.slurm.localcluster.manager import LocalCluster
from slurm_hase.slurm.localcluster.paths import ClusterPaths
from slurm_hase.slurm.localcluster.saved import (
    mariadb_data_problem,
    mariadb_release,
    saved_mariadb_release,
    saved_protocol,
    saved_state_problem,
    slurm_state_problem,
)
from slurm_hase.slurm.localcluster.spec import load_spec

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
OLD, NEW = FIXTURES / "local-22.05", FIXTURES / "local-24.11"


def _state(root: Path, release: Path) -> Path:
    """A state folder as `release`'s Slurm and MariaDB left it (their real file headers)."""
    state = root / "state"
    (state / "ctld").mkdir(parents=True)
    (state / "mysql").mkdir()
    shutil.copy(release / "node_state.head", state / "ctld" / "node_state")
    for name in ("mysql_upgrade_info", "mariadb_upgrade_info"):
        if (release / name).exists():
            shutil.copy(release / name, state / "mysql" / name)
    return state


def test_the_protocol_version_is_read_from_real_state_files(tmp_path: Path) -> None:
    assert saved_protocol(_state(tmp_path / "a", OLD) / "ctld") == 38
    assert saved_protocol(_state(tmp_path / "b", NEW) / "ctld") == 42
    assert saved_protocol(tmp_path / "nothing") is None
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "node_state").write_bytes(b"\x00\x00\x00\x03abc")
    assert saved_protocol(tmp_path / "odd") is None  # no version header: slurmctld judges


def test_slurm_reads_its_own_release_and_two_before_it_only() -> None:
    assert slurm_state_problem(42, (24, 11)) is None
    assert slurm_state_problem(40, (24, 11)) is None  # 23.11 -> 24.11: a supported upgrade
    older = slurm_state_problem(38, (24, 11))
    assert older is not None and "22.05" in older and "more than two releases" in older
    newer = slurm_state_problem(42, (22, 5))
    assert newer is not None and "24.11" in newer and "newer release" in newer
    assert slurm_state_problem(38, (99, 1)) is None  # a release the table does not know


def test_mariadb_versions_from_real_files_and_version_output() -> None:
    assert mariadb_release((OLD / "mysql_upgrade_info").read_text()) == (10, 11)
    assert mariadb_release((NEW / "mariadb_upgrade_info").read_text()) == (11, 8)
    assert mariadb_release((OLD / "mariadbd-version.txt").read_text()) == (10, 11)
    assert mariadb_release((NEW / "mariadbd-version.txt").read_text()) == (11, 8)
    assert mariadb_release("no version here") is None


def test_an_older_mariadb_cannot_open_a_newer_data_folder(tmp_path: Path) -> None:
    newer = saved_mariadb_release(_state(tmp_path / "new", NEW) / "mysql")
    older = saved_mariadb_release(_state(tmp_path / "old", OLD) / "mysql")
    assert (newer, older) == ((11, 8), (10, 11))
    problem = mariadb_data_problem(newer, (10, 11))
    assert problem is not None and "11.8" in problem and "10.11" in problem
    assert mariadb_data_problem(older, (11, 8)) is None  # MariaDB upgrades an older one
    assert mariadb_data_problem(newer, (11, 8)) is None
    assert mariadb_data_problem(newer, None) is None  # the installed release is unknown
    assert saved_mariadb_release(tmp_path) is None  # no data folder yet


def test_the_message_names_both_releases_and_the_way_out(tmp_path: Path) -> None:
    state = _state(tmp_path / "cluster", NEW)
    message = saved_state_problem(tmp_path / "cluster", state, lambda: (22, 5),
                                  lambda: (OLD / "mariadbd-version.txt").read_text())
    assert message is not None
    assert "Slurm 24.11" in message and "MariaDB 11.8" in message
    assert f"mv {tmp_path / 'cluster'} {tmp_path / 'cluster'}.old" in message
    assert saved_state_problem(tmp_path / "cluster", state, lambda: (24, 11),
                               lambda: (NEW / "mariadbd-version.txt").read_text()) is None


def test_a_fresh_folder_asks_nothing(tmp_path: Path) -> None:
    def never_release() -> tuple[int, int]:
        raise AssertionError("asked for the installed Slurm release without saved state")

    def never_version() -> str:
        raise AssertionError("asked for the installed MariaDB without saved state")

    assert saved_state_problem(tmp_path, tmp_path / "state", never_release,
                               never_version) is None


@pytest.mark.skipif(shutil.which("slurmd", path="/usr/sbin:/usr/bin") is None
                    or shutil.which("mariadbd", path="/usr/sbin:/usr/bin") is None,
                    reason="needs Debian's slurm-wlm and mariadb-server (slurmd -V, "
                           "mariadbd --version)")
def test_up_refuses_the_other_releases_folder_before_starting_anything(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Against this host's real slurmd and mariadbd: the other Debian release's state (22.05's
    is more than two releases before 24.11; 24.11's is newer than 22.05) stops `up` with
    both releases named, where slurmctld used to fail after the timeout."""
    cluster = LocalCluster(load_spec(None), ClusterPaths(tmp_path / "cluster"))
    installed = cluster._slurm_version()
    other = OLD if installed >= (24, 11) else NEW
    _state(cluster.paths.root, other)
    monkeypatch.setattr(cluster.table, "alive", dict)
    monkeypatch.setattr(cluster, "_check_ports", lambda already: None)

    def started(*_: object) -> None:
        raise AssertionError("a daemon was started")

    monkeypatch.setattr(cluster, "_prepare", started)
    with pytest.raises(ClusterError, match="made by other releases") as caught:
        cluster._up(lambda _: None, 5.0)
    assert ("22.05" if other is OLD else "24.11") in str(caught.value)
    assert f"{installed[0]}.{installed[1]:02d}" in str(caught.value)
