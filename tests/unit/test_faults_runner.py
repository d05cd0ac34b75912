"""Fault audit: SubprocessRunner, the one place that starts Slurm's commands.

A hung command must come back as SlurmTimeoutError (a SlurmError: the daemon backs off, hsbatch
fails open) with the child killed; no unit test exercised that path before (turning the
`except subprocess.TimeoutExpired` off left the unit suite green). A command that cannot be
started must be a SlurmError too, whatever errno the kernel gives.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from slurm_hase.errors import SlurmError, SlurmTimeoutError
from slurm_hase.slurm.command_backend import CommandBackend
from slurm_hase.slurm.runner import SubprocessRunner


def test_a_hung_command_is_a_typed_timeout_and_does_not_hang_the_caller(tmp_path: Path) -> None:
    marker = tmp_path / "still-running"
    hung = tmp_path / "squeue"
    hung.write_text(f"#!/bin/sh\nsleep 3\ntouch {marker}\n")
    hung.chmod(0o755)
    t0 = time.monotonic()
    with pytest.raises(SlurmTimeoutError, match="did not answer within 0.3s") as info:
        SubprocessRunner().run([str(hung), "--json"], timeout_s=0.3)
    assert time.monotonic() - t0 < 2.5
    assert info.value.argv == [str(hung), "--json"]
    time.sleep(3.2)
    assert not marker.exists(), "the timed-out command was left running"


def test_the_backend_passes_its_timeout_and_the_error_is_a_slurm_error(tmp_path: Path) -> None:
    hung = tmp_path / "scontrol"
    hung.write_text("#!/bin/sh\nsleep 3\n")
    hung.chmod(0o755)
    backend = CommandBackend(SubprocessRunner(), version=(24, 11), timeout_s=0.3)
    with pytest.raises(SlurmError):
        backend._run([str(hung), "show", "config"])


def test_a_slurm_command_that_cannot_be_started_is_a_slurm_error(tmp_path: Path) -> None:
    """FileNotFoundError is turned into SlurmCommandError (127); PermissionError (no x bit, a
    folder) escapes raw, so Daemon.step (which catches SlurmError) ends the process."""
    not_executable = tmp_path / "squeue"
    not_executable.write_text("#!/bin/sh\necho '{}'\n")
    not_executable.chmod(0o644)
    with pytest.raises(SlurmError):
        SubprocessRunner().run([str(not_executable), "--json"])


def test_relaying_runner_times_out_and_puts_the_handlers_back() -> None:
    import signal

    from slurm_hase.errors import SlurmTimeoutError
    from slurm_hase.slurm.runner import RelayingRunner

    before = signal.getsignal(signal.SIGTERM)
    runner = RelayingRunner()
    with runner.relaying(), pytest.raises(SlurmTimeoutError):
        runner.run(["sleep", "5"], timeout_s=0.2)
    assert signal.getsignal(signal.SIGTERM) is before


def test_relaying_runner_passes_a_signal_on_and_returns_what_the_command_said() -> None:
    import os
    import signal
    import threading

    from slurm_hase.slurm.runner import RelayingRunner

    runner = RelayingRunner()
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    with runner.relaying():
        r = runner.run(["sh", "-c", "trap 'echo got TERM; exit 7' TERM; echo started; "
                        "i=0; while [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done"], stdin="", timeout_s=30)
    timer.join()
    assert (r.returncode, r.stdout) == (7, "started\ngot TERM\n")
    assert runner.relayed == [signal.SIGTERM]


def test_relaying_runner_outside_relaying_is_a_plain_runner() -> None:
    from slurm_hase.errors import SlurmCommandError
    from slurm_hase.slurm.runner import RelayingRunner

    runner = RelayingRunner()
    assert runner.run(["sh", "-c", "cat; exit 4"], stdin="x").stdout == "x"
    with runner.relaying(), pytest.raises(SlurmCommandError, match="command not found"):
        runner.run(["/nonexistent/sbatch"])
