"""`hase gpu mps render` over scripts that slurmd may be running: a prolog that is running when
the admin re-renders finishes as the script it started as."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from slurm_hase.mps.render import MpsConfig, write_scripts
from tests.unit.test_mps_scripts import _calls, _stopped, daemons, node

__all__ = ["node"]  # the fixture, used by name


def _config(node: dict[str, Path], log_file: str) -> MpsConfig:
    return MpsConfig(pipe_dir=str(node["pipe"]), log_dir=str(node["log"]), syslog=False,
                     log_file=log_file, start_timeout_s=20)


def _wait_for(path: Path, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.05)


def test_rerender_while_the_prolog_runs(node: dict[str, Path]) -> None:
    """bash reads a script as it goes: the prolog waiting for its daemon's control pipe must
    carry on with its own text after a re-render, not at its old offset in the new one."""
    out = node["root"] / "out"
    prolog = write_scripts(_config(node, str(node["root"] / "a.log")), out)["prolog"]
    env = {"PATH": f"{node['bin']}:/usr/bin:/bin", "FAKE_MPS_RECORD": str(node["record"]),
           "FAKE_MPS_DAEMONS": str(node["daemons"]), "FAKE_MPS_DAEMON_LOG": str(node["daemon_log"]),
           "SLURM_JOB_ID": "4242", "SLURM_JOB_UID": "1234", "CUDA_VISIBLE_DEVICES": "0",
           "SLURM_HASE_MPS": "50", "FAKE_MPS_NO_PIPE": "1"}  # the test opens the pipe itself
    proc = subprocess.Popen(["/bin/bash", str(prolog)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        pipe = node["pipe"] / "4242"
        _wait_for(pipe / "nvidia-cuda-mps-control.pid")  # daemon up: the prolog waits for control
        longer = str(node["root"] / ("logs-" + "x" * 200) / "b.log")  # shifts every later byte
        write_scripts(_config(node, longer), out)
        (pipe / "control").write_text("")
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "command not found" not in stderr and "syntax error" not in stderr, stderr
    assert proc.returncode == 0, stderr
    assert "MPS server started for uid 1234" in stderr
    assert [c.split(" stdin=")[0] for c in _calls(node)] == ["args=[-d]", "args=[]", "args=[]"]
    assert len(daemons(node["daemons"])) == 1 and not _stopped(node)


def test_rerender_leaves_no_temporary_files(node: dict[str, Path]) -> None:
    out = node["root"] / "out"
    for log_file in ("/var/log/a.log", "/var/log/b.log"):
        paths = write_scripts(_config(node, log_file), out)
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in paths.values())
    assert "LOG_FILE=/var/log/b.log\n" in paths["epilog"].read_text()
    assert paths["prolog"].stat().st_mode & 0o777 == 0o755
    assert paths["plugstack"].stat().st_mode & 0o777 == 0o644
