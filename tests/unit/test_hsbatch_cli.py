"""The console entry: as a program it exits without teardown, yet relays every byte and the code."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest

from slurm_hase.hsbatch import cli
from slurm_hase.slurm.runner import SubprocessRunner

OUT = "Submitted batch job 7\n"  # stays in stdout's buffer (a pipe) unless hsbatch flushes


def fake_sbatch(tmp_path: Path) -> Path:
    exe = tmp_path / "sbatch"
    exe.write_text("#!/bin/sh\n"
                   f"printf '{OUT.strip()}\\n'\necho \"args: $*\" >&2\nexit 3\n")
    exe.chmod(0o755)
    return exe


def test_program_relays_everything_then_exits_fast(tmp_path: Path) -> None:
    runner = SubprocessRunner({"HSBATCH_SBATCH": str(fake_sbatch(tmp_path)),
                               "PYTHONUNBUFFERED": ""})  # block-buffered stdout, as usual
    r = runner.run([sys.executable, "-m", "slurm_hase.hsbatch.cli", "--hase-explain", "-J", "x",
                    "--wrap=true"], timeout_s=60)
    assert r.returncode == 3
    assert r.stdout == OUT
    assert "args: -J x --wrap=true" in r.stderr and "no workload description" in r.stderr


def test_called_with_argv_returns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HSBATCH_SBATCH", str(fake_sbatch(tmp_path)))
    assert cli.main(["--wrap=true"]) == 3  # in-process callers get the code back
    out, err = capfd.readouterr()
    assert out == OUT and "args: --wrap=true" in err


def test_reader_closing_the_pipe_leaves_no_traceback(tmp_path: Path) -> None:
    """`hsbatch --help | head -1`: sbatch's long help and ours meet a closed pipe; hsbatch
    ends with sbatch's code and says nothing on stderr."""
    exe = tmp_path / "sbatch"
    exe.write_text("#!/bin/sh\nyes 'Usage: sbatch [OPTIONS...] script' | head -n 20000\n")
    exe.chmod(0o755)
    runner = SubprocessRunner({"HSBATCH_SBATCH": str(exe)})
    r = runner.run(["/bin/sh", "-c", f"'{sys.executable}' -m slurm_hase.hsbatch.cli --help | "
                    "head -n 1"], timeout_s=60)
    assert r.stdout == "Usage: sbatch [OPTIONS...] script\n"
    assert "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr, r.stderr


def test_closed_pipe_safe_swallows_only_a_gone_reader() -> None:
    class Gone:
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self) -> None:
            raise BrokenPipeError(32, "Broken pipe")

        def fileno(self) -> int:
            raise ValueError("no descriptor")

    sink = cli.ClosedPipeSafe(Gone())  # type: ignore[arg-type]
    assert sink.write("abc") == 3 and sink.closed_by_reader
    sink.flush()  # quiet from now on

    class Full:
        def write(self, text: str) -> int:
            raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        cli.ClosedPipeSafe(Full()).write("x")  # type: ignore[arg-type]


@pytest.mark.parametrize("signum", [15, 1])  # SIGTERM, SIGHUP
def test_signal_to_hsbatch_alone_reaches_sbatch_and_the_id_is_relayed(tmp_path: Path,
                                                                     signum: int) -> None:
    """`kill PID` of a waiting hsbatch (a workflow manager giving up) used to kill hsbatch
    only: sbatch ran on, and its output, the job id, went nowhere. Now sbatch gets the signal,
    ends, and hsbatch relays what it said and exits with its code."""
    import os
    import signal
    import subprocess
    import time

    ready = tmp_path / "waiting"
    exe = tmp_path / "sbatch"
    exe.write_text("#!/bin/sh\n"
                   "trap 'echo \"sbatch: got $SIG\" >&2; exit 143' TERM\n"
                   "trap 'echo \"sbatch: got $SIG\" >&2; exit 129' HUP\n"
                   f"echo 'Submitted batch job 7'\ntouch '{ready}'\n"
                   "i=0; while [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done\n")
    exe.chmod(0o755)
    env = dict(os.environ, HSBATCH_SBATCH=str(exe), SIG="it")
    p = subprocess.Popen([sys.executable, "-m", "slurm_hase.hsbatch.cli", "--wait",
                          "--wrap=true"], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert time.monotonic() < deadline and p.poll() is None, p.communicate()
            time.sleep(0.05)
        os.kill(p.pid, signum)  # hsbatch alone, not its process group
        out, err = p.communicate(timeout=30)
    finally:  # whatever is left of the session (a sbatch hsbatch left behind, before the fix)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=30)
    assert out == "Submitted batch job 7\n", (out, err)
    assert "sbatch: got it" in err and "Traceback" not in err, err
    assert p.returncode == (143 if signum == 15 else 129)
