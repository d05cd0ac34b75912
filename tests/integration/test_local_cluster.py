"""The local cluster itself: shape, readiness, idempotent up, restartable slurmctld."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from slurm_hase.slurm.localcluster.manager import LocalCluster
from slurm_hase.slurm.runner import SubprocessRunner


def test_every_node_has_typed_gpus_and_features(slurm_runner: SubprocessRunner) -> None:
    res = slurm_runner.run(["sinfo", "-N", "-h", "-o", "%N|%G|%f|%T"]).check()
    rows = {line.split("|")[0]: line.split("|")[1:] for line in res.stdout.splitlines()}
    assert sorted(rows) == ["a100-1", "a100-2", "t4-1", "t4-2", "v100-1", "v100-2"]
    for node, (gres, features, _state) in rows.items():
        gpu_type = node.split("-")[0]
        assert f"gpu:{gpu_type}:4" in gres
        assert "mps" in gres
        assert gpu_type in features.split(",")


def test_up_twice_is_harmless(local_cluster: LocalCluster) -> None:
    before = local_cluster.table.alive()
    status = local_cluster.up()
    assert status.ready
    assert local_cluster.table.alive() == before  # nothing restarted


def test_accounts_registered(slurm_runner: SubprocessRunner) -> None:
    res = slurm_runner.run(["sacctmgr", "-n", "-P", "show", "assoc", "format=account,user"]).check()
    pairs = {tuple(line.split("|")) for line in res.stdout.splitlines()}
    assert ("teama", "root") in pairs and ("teamb", "root") in pairs


def test_slurmctld_restart_comes_back(local_cluster: LocalCluster) -> None:
    local_cluster.stop_service("slurmctld")
    assert local_cluster.node_states() == {}
    local_cluster.start_slurmctld()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not local_cluster.status().ready:
        time.sleep(0.5)
    assert local_cluster.status().ready


def test_down_stops_exactly_our_processes_and_up_restores(local_cluster: LocalCluster) -> None:
    from slurm_hase.slurm.localcluster.services import process_alive, stray_stepds

    entries = local_cluster.table.load()
    ours = {name: (int(str(e["pid"])), str(e["binary"])) for name, e in entries.items()}
    assert len(ours) == 10  # munged, mariadb, slurmdbd, slurmctld, 6 x slurmd
    stopped = local_cluster.down()
    assert sorted(stopped) == sorted(ours)
    assert not [n for n, (pid, binary) in ours.items() if process_alive(pid, binary)]
    assert stray_stepds(local_cluster.paths.slurm_conf) == []
    started = time.monotonic()
    # two `up`s at once (two users, or a test run beside a demo): before the lock, both started
    # slurmdbd; the second died on the port and its dead pid replaced the first's in pids.json,
    # so `status` said "accounting: not answering" and every later `up` failed on the port
    with ThreadPoolExecutor(2) as pool:
        statuses = list(pool.map(lambda _: local_cluster.up(), range(2)))
    assert all(s.ready for s in statuses)
    assert time.monotonic() - started < 90
    assert sorted(local_cluster.table.alive()) == sorted(ours)
    assert local_cluster.status().ready
