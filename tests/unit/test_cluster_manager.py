"""The local cluster's process table, permissions and messages (review of `hase cluster`)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slurm_hase.errors import ClusterError, SlurmTimeoutError
from slurm_hase.slurm.localcluster import manager as manager_mod
from slurm_hase.slurm.localcluster.manager import LocalCluster
from slurm_hase.slurm.localcluster.paths import ClusterPaths, write_private
from slurm_hase.slurm.localcluster.services import ProcessTable, process_alive, start_ticks
from slurm_hase.slurm.localcluster.spec import load_spec


@pytest.fixture()
def named_process() -> Iterator[subprocess.Popen[bytes]]:
    """A process whose argv[0] is `slurmdbd` (bash's exec -a), killed afterwards."""
    proc = subprocess.Popen(["bash", "-c", "exec -a slurmdbd sleep 60"])
    try:
        for _ in range(100):  # until the exec has happened
            if Path(f"/proc/{proc.pid}/cmdline").read_bytes().startswith(b"slurmdbd"):
                break
            subprocess.run(["sleep", "0.02"], check=True)
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_slurmd_is_not_slurmdbd(named_process: subprocess.Popen[bytes]) -> None:
    """A recorded slurmd pid reused by a slurmdbd was taken for our slurmd (substring test):
    `up` skipped starting it and `down` killed the other daemon."""
    assert process_alive(named_process.pid, "slurmdbd")
    assert not process_alive(named_process.pid, "slurmd")
    assert not process_alive(named_process.pid, "dbd")


def test_slurmstepd_is_found_by_its_own_name() -> None:
    proc = subprocess.Popen(["bash", "-c", "exec -a 'slurmstepd: [7.batch]' sleep 60"])
    try:
        for _ in range(100):
            if Path(f"/proc/{proc.pid}/cmdline").read_bytes().startswith(b"slurmstepd"):
                break
            subprocess.run(["sleep", "0.02"], check=True)
        assert process_alive(proc.pid, "slurmstepd") and not process_alive(proc.pid, "slurmd")
    finally:
        proc.kill()
        proc.wait()


def test_a_reused_pid_is_not_our_daemon(tmp_path: Path,
                                        named_process: subprocess.Popen[bytes]) -> None:
    """pids.json keeps each daemon's start time and the boot: after a reboot, or once the pid
    names a later process of the same binary, the entry is not alive."""
    paths = ClusterPaths(tmp_path)
    paths.run.mkdir()
    table = ProcessTable(paths)
    table.record("slurmdbd", named_process.pid, "slurmdbd")
    assert table.alive() == {"slurmdbd": named_process.pid}
    entry = table.load()["slurmdbd"]
    assert entry["start"] == start_ticks(named_process.pid) and entry["boot"]
    for changed in ({"start": int(str(entry["start"])) - 1}, {"boot": "another-boot"}):
        paths.pids_file.write_text(json.dumps({"slurmdbd": {**entry, **changed}}))
        assert table.alive() == {}
    # a table written by an earlier version (no start, no boot) still works
    paths.pids_file.write_text(json.dumps({"slurmdbd": {"pid": named_process.pid,
                                                        "binary": "slurmdbd"}}))
    assert table.alive() == {"slurmdbd": named_process.pid}


def test_forget_rewrites_the_table_whole(tmp_path: Path) -> None:
    paths = ClusterPaths(tmp_path)
    paths.run.mkdir()
    table = ProcessTable(paths)
    table.record("a", os.getpid(), "python")
    table.record("b", os.getpid(), "python")
    table.forget("a")
    assert set(table.load()) == {"b"}
    assert not paths.pids_file.with_suffix(".tmp").exists()  # written aside, then renamed


def test_private_files_are_never_readable_by_others(tmp_path: Path) -> None:
    target = tmp_path / "db-password"
    target.write_text("old")
    os.chmod(target, 0o644)
    write_private(target, "secret")
    assert target.read_text() == "secret"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def _cluster(tmp_path: Path) -> LocalCluster:
    return LocalCluster(load_spec(None), ClusterPaths(tmp_path / "cluster"))


def test_up_needs_root_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(ClusterError, match="must run as root"):
        _cluster(tmp_path).up()
    assert not (tmp_path / "cluster").exists()


@pytest.mark.skipif(shutil.which("slurmctld", path="/usr/sbin") is None,
                    reason="needs Debian's slurm-wlm (slurmctld in /usr/sbin)")
def test_daemons_in_sbin_are_found_without_sbin_on_path(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A non-root shell's PATH has no /usr/sbin: the packages were reported missing."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:/usr/bin:/bin")
    _cluster(tmp_path)._check_binaries()


@pytest.mark.skipif(shutil.which("slurmd", path="/usr/sbin:/usr/bin") is None,
                    reason="needs Debian's slurm-wlm (slurmd -V)")
def test_configs_changed_since_up_are_named(tmp_path: Path) -> None:
    """`up` on a running cluster returned "already up" with configs an older spec, template or
    an unbuilt SPANK plugin had rendered; it now names the files that differ."""
    cluster = _cluster(tmp_path)
    cluster.paths.etc.mkdir(parents=True)
    cluster.paths.db_password_file.write_text("pw")
    for name, text in cluster._rendered().items():
        (cluster.paths.etc / name).write_text(text)
    assert cluster._changed_configs() == []
    (cluster.paths.etc / "gres.conf").write_text("# older\n")
    (cluster.paths.etc / "slurmdbd.conf").unlink()
    assert sorted(cluster._changed_configs()) == ["gres.conf", "slurmdbd.conf"]


def test_not_ready_names_the_stuck_nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = _cluster(tmp_path)
    nodes = cluster.spec.node_names
    states = {n: "IDLE" for n in nodes} | {nodes[0]: "DRAINED", nodes[1]: "DOWN"}
    del states[nodes[2]]

    def status() -> Any:
        return manager_mod.ClusterStatus("r", "c", {}, states, True, len(nodes))

    monkeypatch.setattr(cluster, "status", status)
    text = cluster._not_ready()
    assert f"nodes not ready: {nodes[0]} DRAINED, {nodes[1]} DOWN" in text
    assert f"scontrol update nodename={nodes[0]},{nodes[1]} state=resume" in text
    assert f"nodes slurmctld does not list: {nodes[2]}" in text
    states.update({n: "PLANNED" for n in nodes})  # 23.02+ backfill's plan: ready
    assert manager_mod.ClusterStatus("r", "c", {}, states, True, len(nodes)).ready


def test_down_goes_on_when_scancel_hangs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A wedged slurmctld made scancel time out and `down` stopped nothing."""
    cluster = _cluster(tmp_path)
    cluster.paths.root.mkdir(parents=True)
    stopped: list[str] = []
    entries = {"slurmctld": {"pid": 11, "binary": "slurmctld"},
               "munged": {"pid": 12, "binary": "munged"}}

    def hang(argv: list[str], **_: Any) -> Any:
        raise SlurmTimeoutError(argv, 10)

    monkeypatch.setattr(cluster.table, "alive", lambda: {n: int(str(e["pid"]))
                                                         for n, e in entries.items()})
    monkeypatch.setattr(cluster.table, "load", lambda: entries)
    monkeypatch.setattr(cluster.table, "forget", lambda name: None)
    monkeypatch.setattr(cluster.runner, "run", hang)
    monkeypatch.setattr(manager_mod, "stop_pid", lambda pid, binary, **_: stopped.append(binary))
    monkeypatch.setattr(manager_mod, "stray_stepds", lambda conf: [])
    said: list[str] = []
    assert cluster.down(said.append) == ["slurmctld", "munged"]
    assert stopped == ["slurmctld", "munged"]
    assert said[0].startswith("scancel failed (")


def test_the_demo_never_follows_slurm_conf_to_another_cluster(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """An admin's shell may point SLURM_CONF at the site's real cluster: the demo submitted its
    jobs there and its daemon cycle reordered that cluster's queue."""
    from slurm_hase.cli.demo import Demo

    monkeypatch.setenv("HASE_CLUSTER_DIR", str(tmp_path / "local"))
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/slurm.conf")
    demo = Demo(tmp_path)
    assert demo.runner.env_overlay["SLURM_CONF"] == str(tmp_path / "local" / "etc" / "slurm.conf")
    assert "SLURM_CONF=/etc/slurm/slurm.conf in this shell is not the local cluster's" in (
        capsys.readouterr().err)


def test_a_cluster_dir_mysql_cannot_reach_is_named(tmp_path: Path) -> None:
    """A --dir under a private folder (/root, umask 077) made MariaDB time out with an empty
    log; the folder is named before anything starts."""
    import tempfile

    from slurm_hase.slurm.localcluster.paths import check_enterable

    top = Path(tempfile.mkdtemp(dir="/tmp"))  # pytest's own tmp folders are private (0700)
    private = top / "private"
    try:
        os.chmod(top, 0o755)
        (private / "cluster").mkdir(parents=True)
        os.chmod(private, 0o700)
        with pytest.raises(ClusterError, match=rf"^{private} \(mode 0700\) cannot be entered"):
            check_enterable(private / "cluster")
        os.chmod(private, 0o711)
        check_enterable(private / "cluster")
    finally:
        shutil.rmtree(top)
