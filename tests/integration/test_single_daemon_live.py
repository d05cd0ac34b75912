"""One daemon per state store, on the real local cluster: while `hase schedd run` loops, a
second `run` and a `reset` are refused naming its pid, a `--dry-run` still looks on, and once
the daemon is stopped (SIGTERM, as systemctl stop does) the store is free again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm


def _hase(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    hase = str(Path(sys.executable).with_name("hase"))
    return subprocess.run([hase, *args], env=env, capture_output=True, text=True, timeout=120)


def test_second_daemon_and_reset_are_refused_while_one_runs(
        tmp_path: Path, slurm_env: dict[str, str]) -> None:
    env = {**os.environ, **slurm_env}
    cfg = tmp_path / "schedd.toml"
    cfg.write_text('[schedd]\npartitions = ["gpu"]\nlog_format = "text"\ninterval_s = 5\n')
    db = tmp_path / "schedd.db"
    common = ["--config", str(cfg), "--state-db", str(db)]
    hase = str(Path(sys.executable).with_name("hase"))
    daemon = subprocess.Popen([hase, "schedd", "run", *common], env=env,  # noqa: S603
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while _hase("schedd", "status", "--json", *common, env=env).stdout.count('"id"') < 1:
            assert daemon.poll() is None, daemon.stderr.read() if daemon.stderr else ""
            assert time.monotonic() < deadline, "the daemon recorded no cycle in 60 s"
            time.sleep(0.5)
        status = json.loads(_hase("schedd", "status", "--json", *common, env=env).stdout)
        assert status["daemon_pid"] == daemon.pid
        second = _hase("schedd", "run", "--once", *common, env=env)
        assert second.returncode == 3, second.stderr
        assert f"another hase schedd (pid {daemon.pid}) is running on {db}" in second.stderr
        reset = _hase("schedd", "reset", *common, env=env)
        assert reset.returncode == 3 and f"pid {daemon.pid}" in reset.stderr
        look = _hase("schedd", "run", "--once", "--dry-run", *common, env=env)
        assert look.returncode == 0, look.stderr
        assert "# policy fair:" in look.stdout
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
    assert daemon.returncode == 0
    assert json.loads(_hase("schedd", "status", "--json", *common, env=env).stdout)[
        "daemon_pid"] is None
    after = _hase("schedd", "run", "--once", *common, env=env)
    assert after.returncode == 0, after.stderr
