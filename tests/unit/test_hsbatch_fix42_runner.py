"""How hsbatch runs sbatch: ignored signals stay ignored, no time limit on the submit call, and
sbatch's output reaches the caller byte for byte in any locale."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from slurm_hase.errors import SlurmTimeoutError
from slurm_hase.hsbatch import cli
from slurm_hase.hsbatch.core import Deps, Io, run
from slurm_hase.slurm.runner import CommandResult, RelayingRunner


def waiting_sbatch(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A fake `sbatch --wait`: says the job id, then waits until the file `stop` appears."""
    ready, stop, exe = tmp_path / "waiting", tmp_path / "stop", tmp_path / "sbatch"
    exe.write_text("#!/bin/sh\necho 'Submitted batch job 7'\n"
                   f"touch '{ready}'\ni=0\n"
                   f"while [ ! -e '{stop}' ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done\n"
                   "echo 'job 7 ended'\n")
    exe.chmod(0o755)
    return ready, stop, exe


@contextlib.contextmanager
def session(argv: list[str], env: Mapping[str, str]) -> Iterator[subprocess.Popen[str]]:
    """A process in a session of its own; whatever is left of it is killed at the end."""
    p = subprocess.Popen(argv, env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        yield p
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=30)


@pytest.mark.parametrize("name", ["HUP", "INT"])
def test_a_signal_the_user_ignores_does_not_end_sbatch(tmp_path: Path, name: str) -> None:
    """Under `trap '' HUP` (what nohup does) a SIGHUP to the process group left plain sbatch
    waiting but killed hsbatch's sbatch (hsbatch exited 129): hsbatch installed its handlers
    over SIG_IGN, and a child gets SIG_DFL for a handled signal. SIGINT likewise (a background
    job's). The signal now stays ignored in hsbatch and in sbatch, which waits on."""
    ready, stop, exe = waiting_sbatch(tmp_path)
    shell = f"trap '' {name}; exec \"$0\" -m slurm_hase.hsbatch.cli --wait --wrap=true"
    env = dict(os.environ, HSBATCH_SBATCH=str(exe))
    with session(["/bin/sh", "-c", shell, sys.executable], env) as p:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert time.monotonic() < deadline and p.poll() is None, p.communicate()
            time.sleep(0.05)
        os.killpg(p.pid, getattr(signal, f"SIG{name}"))
        time.sleep(0.5)
        assert p.poll() is None, p.communicate()  # both still waiting, as plain sbatch
        stop.touch()
        out, err = p.communicate(timeout=30)
    assert (p.returncode, out) == (0, "Submitted batch job 7\njob 7 ended\n"), err


def ignored_mask(status: str) -> int:
    return int(next(line for line in status.splitlines() if line.startswith("SigIgn:"))
               .split()[1], 16)


def test_relaying_runner_leaves_ignored_signals_to_the_command() -> None:
    """An ignored SIGHUP gets no relay handler and reaches the command as SIG_IGN; SIGTERM,
    not ignored, is still relayed (handled, so the command starts with SIG_DFL)."""
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        runner = RelayingRunner()
        with runner.relaying():
            r = runner.run(["cat", "/proc/self/status"], timeout_s=30)
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)
    mask = ignored_mask(r.stdout)
    assert mask & (1 << (signal.SIGHUP - 1))
    assert not mask & (1 << (signal.SIGTERM - 1))


class TimeoutRecorder:
    """A runner that records each call's timeout."""

    def __init__(self) -> None:
        self.timeouts: list[tuple[str, float | None]] = []

    def run(self, argv: Sequence[str], *, stdin: str | None = None,
            env: Mapping[str, str] | None = None, timeout_s: float | None = 60.0,
            cwd: str | None = None) -> CommandResult:
        self.timeouts.append((argv[1], timeout_s))
        if argv[1:] == ["--version"]:
            return CommandResult(tuple(argv), 0, "slurm 22.05.8\n", "")
        return CommandResult(tuple(argv), 0, "Submitted batch job 7\n", "")


@pytest.mark.parametrize("argv", [["--wait", "--wrap=true"], ["--help"],
                                  ["--ext", "4", "--wrap=true"]])
def test_sbatch_runs_with_no_time_limit(argv: list[str]) -> None:
    """`hsbatch --wait` killed sbatch after 7 days (SBATCH_TIMEOUT_S), dropped its output and
    exited 1. The submit call now has no limit; `sbatch --version` (asked only to read an
    option's name) keeps its own."""
    runner = TimeoutRecorder()
    out, err = io.StringIO(), io.StringIO()
    assert run(argv, Io(lambda: "", out, err, {}), Deps(runner=runner)) == 0
    assert [t for word, t in runner.timeouts if word != "--version"] == [None]
    assert all(t == 30 for word, t in runner.timeouts if word == "--version")


def test_relaying_runner_waits_without_limit_and_keeps_a_given_one() -> None:
    runner = RelayingRunner()
    with runner.relaying():
        r = runner.run(["sh", "-c", "sleep 0.2; cat"], stdin="x", timeout_s=None)
        assert (r.returncode, r.stdout) == (0, "x")
        with pytest.raises(SlurmTimeoutError):
            runner.run(["sleep", "5"], timeout_s=0.2)


SAID = "Submitted batch job 9 café\n".encode() + b"\xff\n"
ERR = "sbatch: job-name            : 名前 café\n".encode()


def test_sbatch_output_passes_byte_for_byte_in_a_latin1_locale(tmp_path: Path) -> None:
    """With a Latin-1 stdout (LC_ALL=en_US.ISO-8859-1), `名前` on sbatch's stderr crashed hsbatch
    with UnicodeEncodeError after the job id (exit 1: a caller may resubmit), and `café`
    changed bytes. Both streams now carry sbatch's very bytes and hsbatch exits with its code."""
    exe = tmp_path / "sbatch"
    exe.write_bytes(b"#!/bin/sh\nprintf '" + SAID.replace(b"\n", b"\\n") + b"'\nprintf '"
                    + ERR.replace(b"\n", b"\\n") + b"' >&2\nexit 3\n")
    exe.chmod(0o755)
    env = dict(os.environ, HSBATCH_SBATCH=str(exe), PYTHONIOENCODING="iso8859-1")
    p = subprocess.run([sys.executable, "-m", "slurm_hase.hsbatch.cli", "--wrap=true"],
                       env=env, capture_output=True, timeout=60, check=False)
    assert (p.returncode, p.stdout, p.stderr) == (3, SAID, ERR)


def test_text_and_bytes_keep_their_order_and_unsayable_text_does_not_fail() -> None:
    """hsbatch's own words go in the locale's encoding (a character it lacks escaped, never
    an error), sbatch's bytes as they are, in the order written."""
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="iso8859-1", errors="surrogateescape")
    sink = cli.ClosedPipeSafe(stream)
    sink.write("warning: é 名\n")
    sink.write_bytes("名\n".encode())
    sink.write("\udcff end\n")  # an undecodable argv byte goes back as it came
    sink.flush()
    assert raw.getvalue() == b"warning: \xe9 \\u540d\n" + "名\n".encode() + b"\xff end\n"


def test_a_stream_without_bytes_underneath_gets_text() -> None:
    """A caller's StringIO as sys.stdout: sbatch's bytes arrive decoded as runner.py decodes
    them, and text it cannot encode is escaped, never an error after the job is submitted."""
    out = io.StringIO()
    sink = cli.ClosedPipeSafe(out)
    sink.write("id ")
    sink.write_bytes("名 \xff".encode("utf-8", "surrogateescape") + b"\xfe\n")
    assert out.getvalue() == "id 名 \xff\udcfe\n"

    class Latin1Text(io.StringIO):
        def write(self, text: str) -> int:
            text.encode("latin-1")
            return super().write(text)

    narrow = Latin1Text()
    cli.ClosedPipeSafe(narrow).write("é 名\n")  # type: ignore[arg-type]
    assert narrow.getvalue() == "\\xe9 \\u540d\n"
