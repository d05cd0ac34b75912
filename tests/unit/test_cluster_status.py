"""`hase cluster status` and `up` count the daemons, not only what slurmctld says."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from slurm_hase.errors import ClusterError
from slurm_hase.slurm.localcluster.manager import LocalCluster
from slurm_hase.slurm.localcluster.paths import ClusterPaths
from slurm_hase.slurm.localcluster.spec import load_spec
from tests.conftest import run_main as _main


def _running_but(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dead: str) -> LocalCluster:
    """A cluster whose daemons all run but `dead`, with every node IDLE and sacct answering
    (a slurmd killed -9: slurmctld lists its node IDLE until SlurmdTimeout)."""
    cluster = LocalCluster(load_spec(None), ClusterPaths(tmp_path / "cluster"))
    names = ["munged", "mariadb", "slurmdbd", "slurmctld",
             *(f"slurmd-{n}" for n in cluster.spec.node_names)]
    alive = {n: 100 + i for i, n in enumerate(names) if n != dead}
    monkeypatch.setattr(cluster.table, "alive", lambda: dict(alive))
    monkeypatch.setattr(cluster, "node_states",
                        lambda: {n: "IDLE" for n in cluster.spec.node_names})
    monkeypatch.setattr(cluster, "accounting_ok", lambda: True)
    return cluster


def test_a_dead_slurmd_is_not_ready(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`status` said ready and `up` said "already up" with a slurmd killed -9 (checked on the
    real cluster): the node was left without its slurmd."""
    dead = "slurmd-t4-1"
    cluster = _running_but(tmp_path, monkeypatch, dead)
    status = cluster.status()
    assert status.missing == [dead] and not status.ready
    assert f"not running: {dead}" in cluster._not_ready()
    assert _running_but(tmp_path, monkeypatch, "none").status().ready


def test_up_starts_a_dead_daemon_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = _running_but(tmp_path, monkeypatch, "munged")
    steps: list[str] = []

    class Stop(Exception):
        pass

    def check_ports(already: dict[str, int]) -> None:
        steps.append("check_ports")
        raise Stop  # `up` goes on to start what is missing (it used to say "already up")

    monkeypatch.setattr(cluster, "_check_ports", check_ports)
    said: list[str] = []
    with pytest.raises(Stop):
        cluster._up(said.append, 90.0)
    assert steps == ["check_ports"] and "already up" not in said


def test_status_json_names_what_does_not_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "cluster"
    code, out, _ = _main(["cluster", "status", "--json", "--dir", str(root)], capsys)
    report = json.loads(out)
    assert code == 1 and report["ready"] is False and report["processes"] == {}
    assert report["not_running"][:4] == ["mariadb", "munged", "slurmctld", "slurmd-a100-1"]
    code, out, _ = _main(["cluster", "status", "--dir", str(root)], capsys)
    assert "not running: mariadb, munged" in out


def test_up_timeout_reaches_each_daemon_wait(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """`up --timeout 300` still gave slurmdbd (making its tables on a first start, slow disk)
    60 s, MariaDB 60 s and munged 15 s: a longer --timeout could not help a slow start."""
    from slurm_hase.slurm.localcluster import manager as manager_mod

    cluster = LocalCluster(load_spec(None), ClusterPaths(tmp_path / "cluster"))
    monkeypatch.setattr(cluster.table, "alive", dict)
    for step in ("_check_ports", "_check_saved_state", "_prepare", "_start_munge",
                 "_start_mariadb", "_register_accounts", "_start_slurm"):
        monkeypatch.setattr(cluster, step, lambda *_: None)
    monkeypatch.setattr(manager_mod, "start_service", lambda *_: 1)
    waits: dict[str, float] = {}

    class Stop(Exception):
        pass

    def wait_for(what: str, check: object, timeout_s: float, *_: object) -> None:
        waits[what] = timeout_s
        raise Stop

    monkeypatch.setattr(manager_mod, "wait_for", wait_for)
    with pytest.raises(Stop):
        cluster._up(lambda _: None, 300.0)
    assert 290 < waits["slurmdbd"] <= 300
    with pytest.raises(Stop):
        cluster._up(lambda _: None, 20.0)
    assert waits["slurmdbd"] == 60  # never less than before


def _never(self: LocalCluster) -> None:
    """Stands for all that `up` does after its checks: a test must never start daemons."""
    raise AssertionError(f"up went past its checks for {self.paths.root}")


@pytest.mark.parametrize("name", ["a b", "a#b", "gpu[0-1]", "a,b", "n%n", "q'uote"])
def test_up_refuses_a_dir_the_configs_cannot_hold(tmp_path: Path, name: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """`up --dir '/tmp/hc odd/c'` wrote datadir=/tmp/hc odd/... into mariadb.cnf and failed
    60 s later on MariaDB's "Table 'mysql.db' doesn't exist", munged left running (seen on the
    real cluster); '[0-1]' or ',' are hostlists in gres.conf, '%n' is expanded by slurmd."""
    import os

    root = tmp_path / name / "cluster"
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(LocalCluster, "_check_binaries", _never)
    cluster = LocalCluster(load_spec(None), ClusterPaths(root))
    with pytest.raises(ClusterError, match="characters Slurm's and MariaDB's config files "
                                           "cannot hold"):
        cluster.up()
    assert not (tmp_path / name).exists()


def test_up_refuses_a_dir_too_long_for_its_sockets(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(LocalCluster, "_check_binaries", _never)
    root = Path("/tmp") / ("d" * 80)
    with pytest.raises(ClusterError, match=r"too long for the Unix sockets under it \(108 bytes"):
        LocalCluster(load_spec(None), ClusterPaths(root)).up()
    assert not root.exists()
    from slurm_hase.slurm.localcluster.paths import root_problem

    assert root_problem(ClusterPaths(Path("/tmp") / ("d" * 79))) is None


def test_a_daemon_that_exits_is_not_called_slow(tmp_path: Path) -> None:
    """MariaDB aborting at once was reported as 'did not become ready within 60s', which
    sends the admin to --timeout; it now says the daemon exited, with its log."""
    import time

    from slurm_hase.slurm.localcluster.services import wait_for

    log = tmp_path / "mariadb.log"
    log.write_text("[ERROR] Aborting\n")
    started = time.monotonic()
    with pytest.raises(ClusterError, match=rf"^MariaDB exited before it was ready \(log {log}\)"
                                           r"\n  \[ERROR\] Aborting$"):
        wait_for("MariaDB", lambda: False, 60, log, lambda: False)
    assert time.monotonic() - started < 5
    with pytest.raises(ClusterError, match=r"^slurmdbd did not become ready within 0.3s"):
        wait_for("slurmdbd", lambda: False, 0.3, None, lambda: True)


@pytest.mark.skipif(shutil.which("slurmd", path="/usr/sbin") is None,
                    reason="needs Debian's slurm-wlm (slurmd in /usr/sbin)")
def test_daemons_in_sbin_are_started_without_sbin_on_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """_check_binaries found slurmd in /usr/sbin with a PATH that lacks it, but `up` then ran
    'slurmd -V' (and spawned munged, mariadbd, ...) with that PATH: 'slurmd: command not found'
    (seen as root with PATH=/usr/bin:/bin)."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:/usr/bin:/bin")
    cluster = LocalCluster(load_spec(None), ClusterPaths(tmp_path / "cluster"))
    cluster._check_binaries()
    assert cluster._slurm_version() >= (20, 0)


@pytest.mark.skipif(shutil.which("slurmctld", path="/usr/sbin") is None,
                    reason="needs Debian's slurm-wlm (slurmctld in /usr/sbin)")
def test_live_tests_find_slurm_without_sbin_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The live tests said 'Slurm is not installed' (a failure under HASE_REQUIRE_CLUSTER=1)
    where `up` finds and starts it: /usr/sbin off PATH."""
    import os

    from tests.integration.conftest import _unavailable_reason

    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert _unavailable_reason() is None


def test_down_needs_root_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A non-root `down` ended in a PermissionError traceback (cluster.lock, then kill)."""
    import os

    from slurm_hase.slurm.localcluster import manager as manager_mod

    cluster = _running_but(tmp_path, monkeypatch, "none")
    cluster.paths.root.mkdir()
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    stopped: list[int] = []
    monkeypatch.setattr(manager_mod, "stop_pid", lambda pid, *_, **__: stopped.append(pid))
    with pytest.raises(ClusterError, match=r"must run as root: .*\(sudo hase cluster down\)"):
        cluster.down()
    assert stopped == [] and not cluster.paths.lock_file.exists()
    monkeypatch.setattr(cluster.table, "alive", dict)  # nothing runs: nothing to do
    assert cluster.down() == []


def _stubbed_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, alive: dict[str, int],
                failing_step: str) -> LocalCluster:
    """A cluster where `alive` runs, every start step does nothing and `failing_step` fails."""
    from slurm_hase.errors import SlurmCommandError

    cluster = LocalCluster(load_spec(None), ClusterPaths(tmp_path / "cluster"))
    monkeypatch.setattr(cluster.table, "alive", lambda: dict(alive))
    monkeypatch.setattr(cluster, "node_states", dict)
    monkeypatch.setattr(cluster, "accounting_ok", lambda: False)
    for step in ("_check_ports", "_check_saved_state", "_prepare", "_start_munge",
                 "_start_mariadb", "_start_slurmdbd", "_register_accounts", "_start_slurm"):
        monkeypatch.setattr(cluster, step, lambda *_: None)

    def fail(*_: object) -> None:
        raise SlurmCommandError(["sacctmgr", "-i", "add"], 1, "Connection refused")

    monkeypatch.setattr(cluster, failing_step, fail)
    return cluster


def test_a_failed_up_says_what_it_left_running(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed start left munged, MariaDB and slurmdbd running without a word: the error now
    names them and both ways on (up again once fixed, or down), with the --dir."""
    alive = {"munged": 1, "mariadb": 2, "slurmdbd": 3}
    cluster = _stubbed_up(tmp_path, monkeypatch, alive, "_register_accounts")
    monkeypatch.setattr(cluster, "_changed_configs", list)
    root = cluster.paths.root
    with pytest.raises(ClusterError) as err:
        cluster._up(lambda _: None, 90.0)
    text = str(err.value)
    assert text.startswith("sacctmgr -i add... exited 1: Connection refused\n")
    assert (f"running: munged, mariadb, slurmdbd; once fixed, 'hase cluster up --dir {root}' "
            f"starts the rest, 'hase cluster down --dir {root}' stops them") in text


def test_up_does_not_rewrite_the_configs_of_running_daemons(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the spec changed and a slurmd dead (not ready), `up` rendered the new configs under
    the running slurmctld and started the slurmd on them; it now asks for down, then up."""
    cluster = _stubbed_up(tmp_path, monkeypatch, {"munged": 1, "slurmctld": 2}, "_prepare")
    monkeypatch.setattr(cluster, "_changed_configs", lambda: ["slurm.conf"])
    with pytest.raises(ClusterError, match=r"runs \(munged, slurmctld\) with other configs .*"
                                           r"\(slurm.conf differ.*'hase cluster down --dir "):
        cluster._up(lambda _: None, 90.0)


def test_a_port_taken_on_another_local_address_is_in_use() -> None:
    """A listener on 127.0.0.2:17003 passed the port check (a test bind on 127.0.0.1), then
    slurmd could not bind 0.0.0.0:17003 and up failed after its whole timeout (seen on the
    real cluster)."""
    import socket

    from slurm_hase.slurm.localcluster.services import port_in_use

    with socket.socket() as other:
        other.bind(("127.0.0.2", 0))
        other.listen()
        port = int(other.getsockname()[1])
        assert port_in_use(port)
    assert not port_in_use(port)


def test_a_node_without_its_slurmd_is_not_sent_to_resume(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A slurmd that could not start (port taken) was named as not running and also given
    'scontrol update ... state=resume', which cannot help a node with no slurmd."""
    cluster = _running_but(tmp_path, monkeypatch, "slurmd-v100-1")
    monkeypatch.setattr(cluster, "node_states", lambda: {
        n: ("UNKNOWN" if n == "v100-1" else "DOWN" if n == "t4-1" else "IDLE")
        for n in cluster.spec.node_names})
    text = cluster._not_ready()
    assert "not running: slurmd-v100-1" in text
    assert "nodes not ready: t4-1 DOWN (resume with: scontrol update nodename=t4-1 " in text
    assert "v100-1 UNKNOWN" not in text


def test_status_and_down_read_the_spec_up_was_given(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """After `up --spec mine.toml`, `status` without --spec checked the default spec's nodes
    (slurmd-a100-1, ...) against a cluster that has others; it now reads the spec that `up`
    saved beside the configs, and a later `up` of the default spec removes it."""
    from slurm_hase.cli import cluster_cmd
    from slurm_hase.slurm.localcluster.manager import LocalCluster

    spec = tmp_path / "mine.toml"
    spec.write_text('name = "mine"\n[[nodes]]\nname = "x-1"\ngpu_type = "t4"\ngpus = 1\n'
                    'cpus = 2\nmemory_mb = 1000\n[[accounts]]\nname = "a"\n')
    root = tmp_path / "cluster"
    monkeypatch.setattr(LocalCluster, "up", lambda self, progress, timeout_s: self.status())
    _main(["cluster", "up", "--spec", str(spec), "--dir", str(root)], capsys)
    assert (root / "etc" / cluster_cmd.SAVED_SPEC).read_text() == spec.read_text()
    _, out, _ = _main(["cluster", "status", "--json", "--dir", str(root)], capsys)
    assert "slurmd-x-1" in json.loads(out)["not_running"]
    assert "slurmd-a100-1" not in json.loads(out)["not_running"]
    _main(["cluster", "up", "--dir", str(root)], capsys)  # the default spec again
    assert not (root / "etc" / cluster_cmd.SAVED_SPEC).exists()
    _, out, _ = _main(["cluster", "status", "--json", "--dir", str(root)], capsys)
    assert "slurmd-a100-1" in json.loads(out)["not_running"]
