"""`hase cluster status` and `up` count the daemons, not only what slurmctld says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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
