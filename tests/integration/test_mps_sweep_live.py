"""`hase gpu mps sweep` against the real cluster's squeue: left-over MPS daemons (the fake
control binary's, started by the rendered prolog) of jobs that ended, run on another node or
never existed are stopped; the daemon of the job running on the node is kept; with slurmctld
down nothing is stopped."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from slurm_hase.mps.units import render_units, write_units
from slurm_hase.slurm.command_backend import CommandBackend
from slurm_hase.slurm.localcluster.manager import LocalCluster
from slurm_hase.slurm.types import JobState
from tests.integration.ctld import slurmctld_stopped
from tests.integration.test_adapter_live import live, submit, wait_for
from tests.integration.test_report_live import _hase
from tests.unit.test_mps_scripts import _alive, _scripts, node
from tests.unit.test_mps_sweep import _start
from tests.unit.test_mps_sweep_units import _exec_start

pytestmark = pytest.mark.slurm
__all__ = ["node", "submit"]  # the fixtures, used by name

NEVER = "999999"  # a job id this cluster has not reached
HASE = str(Path(sys.executable).with_name("hase"))


def _running(backend: CommandBackend, job_id: str, where: str) -> bool | None:
    job = live(backend, job_id)
    return True if job and job.state is JobState.RUNNING and job.nodes == where else None


def _sweep_env(node: dict[str, Path], slurm_env: dict[str, str]) -> dict[str, str]:
    return {**slurm_env, "PATH": f"{node['bin']}:/usr/bin:/bin:/usr/sbin:/sbin",
            "FAKE_MPS_RECORD": str(node["record"]), "FAKE_MPS_DAEMONS": str(node["daemons"]),
            "FAKE_MPS_DAEMON_LOG": str(node["daemon_log"])}


def test_sweep_keeps_the_running_job_and_stops_the_rest(
        node: dict[str, Path], slurm_backend: CommandBackend, slurm_env: dict[str, str],
        submit: Callable[..., str]) -> None:
    here = submit("-w", "a100-1", "--gres=gpu:1", "--wrap", "sleep 300")
    there = submit("-w", "a100-2", "--gres=gpu:1", "--wrap", "sleep 300")
    ended = submit("-w", "a100-1", "--wrap", "true")
    wait_for("both sleepers running", lambda: _running(slurm_backend, here, "a100-1")
             and _running(slurm_backend, there, "a100-2"))
    wait_for("the short job to end", lambda: True if (j := live(slurm_backend, ended)) is None
             or j.state is JobState.COMPLETED else None)
    scripts = _scripts(node)
    pids = _start(node, scripts, here, there, ended, NEVER)
    env = _sweep_env(node, slurm_env)
    args = ["gpu", "mps", "sweep", "--scripts", str(scripts["epilog"].parent), "--node",
            "a100-1", "--min-age", "0", "--json"]

    dry = _hase(env, *args, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    actions = {o["job_id"]: o["action"] for o in json.loads(dry.stdout)["outcomes"]}
    assert actions == {here: "kept", there: "would-stop", ended: "would-stop",
                       NEVER: "would-stop"}
    assert all(_alive(pid) for pid in pids.values())

    res = _hase(env, *args)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["node"] == "a100-1" and report["pipe_base"] == str(node["pipe"])
    actions = {o["job_id"]: o["action"] for o in report["outcomes"]}
    assert actions == {here: "kept", there: "stopped", ended: "stopped", NEVER: "stopped"}
    assert _alive(pids[here]) and (node["pipe"] / here / "control").exists()
    for job_id in (there, ended, NEVER):
        assert not _alive(pids[job_id]) and not (node["pipe"] / job_id).exists(), job_id

    # the same pipe base swept as a100-2's: the job running on a100-1 is not its own
    res = _hase(env, *args[:5], "--node", "a100-2", "--min-age", "0")
    assert res.returncode == 0, res.stderr
    assert f"job {here}: stopped (the job no longer runs on this node" in res.stdout
    assert not _alive(pids[here])


def test_sweep_with_slurmctld_down_stops_nothing(
        node: dict[str, Path], local_cluster: LocalCluster, slurm_env: dict[str, str]) -> None:
    scripts = _scripts(node)
    pids = _start(node, scripts, NEVER)
    with slurmctld_stopped(local_cluster):
        res = _hase(_sweep_env(node, slurm_env), "gpu", "mps", "sweep", "--scripts",
                    str(scripts["epilog"].parent), "--node", "a100-1", "--min-age", "0",
                    "--timeout", "20")
        assert res.returncode != 0
        assert "hase: error: cannot ask Slurm which jobs run on a100-1: scontrol" in res.stderr
        assert "nothing was stopped" in res.stderr, res.stderr
        assert _alive(pids[NEVER]) and (node["pipe"] / NEVER / "control").exists()


def test_the_rendered_timer_service_runs_the_sweep(
        node: dict[str, Path], slurm_env: dict[str, str]) -> None:
    """The command in hase-mps-sweep.service (systemd's quoting undone) sweeps the scripts'
    folder against the real squeue; as written, on this host, whose name is no NodeName of the
    local cluster, it refuses to guess."""
    scripts = _scripts(node)
    folder = scripts["epilog"].parent
    service = write_units(folder, render_units(folder, hase=HASE))["sweep-service"]
    argv = _exec_start(service.read_text())
    pids = _start(node, scripts, NEVER)
    env = _sweep_env(node, slurm_env)
    res = subprocess.run([*argv, "--node", "a100-1", "--min-age", "0"], env=env,
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    assert f"job {NEVER}: stopped" in res.stdout and not _alive(pids[NEVER])
    host = socket.gethostname().split(".")[0]
    res = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 2 and f"node {host!r} is not a node of this Slurm cluster" in res.stderr
