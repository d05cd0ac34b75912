"""The one place that runs external processes. Everything else gets a Runner passed in."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import FrameType
from typing import NamedTuple, Protocol

from slurm_hase.errors import SlurmCommandError, SlurmTimeoutError


class CommandResult(NamedTuple):
    """Outcome of one command (a NamedTuple: cheap to define, which hsbatch's start-up needs)."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def check(self) -> CommandResult:
        """Raise SlurmCommandError unless the command succeeded."""
        if self.returncode != 0:
            raise SlurmCommandError(list(self.argv), self.returncode, self.stderr)
        return self


# how commands' bytes are decoded (and stdin encoded): bytes that are not UTF-8 come back as
# surrogates, which encode back to the very same bytes (hsbatch relays sbatch's output so)
STREAM_BYTES = ("utf-8", "surrogateescape")


class Runner(Protocol):
    """Runs a command and returns its result; never raises on a non-zero exit. `timeout_s`
    None: no time limit (``sbatch --wait``)."""

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout_s: float | None = 60.0,
        cwd: str | None = None,
    ) -> CommandResult: ...


class SubprocessRunner:
    """Runner backed by subprocess, with a fixed environment overlay (e.g. SLURM_CONF)."""

    def __init__(self, env_overlay: Mapping[str, str] | None = None) -> None:
        self.env_overlay = dict(env_overlay or {})

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout_s: float | None = 60.0,
        cwd: str | None = None,
    ) -> CommandResult:
        return self._run(argv, stdin, env, timeout_s, cwd)

    def _run(self, argv: Sequence[str], stdin: str | None, env: Mapping[str, str] | None,
             timeout_s: float | None, cwd: str | None,
             started: Callable[[subprocess.Popen[bytes]], None] | None = None) -> CommandResult:
        """`run`, what subprocess.run does (stdin inherited when None; on a timeout the command
        is killed and reaped; `timeout_s` None: no limit), handing the started process to
        `started` first."""
        with _command_errors(argv, timeout_s), subprocess.Popen(  # noqa: S603 - argv list
                list(argv), stdin=None if stdin is None else subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self._env(env),
                cwd=cwd) as proc:
            if started is not None:
                started(proc)
            try:
                out, err = proc.communicate(None if stdin is None else stdin.encode(*STREAM_BYTES),
                                            timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()  # and reaped, not read to the end: a grandchild may hold the pipes
                proc.wait()
                raise
        return _result(argv, proc.returncode, out, err)

    def _env(self, env: Mapping[str, str] | None) -> dict[str, str]:
        """This process's environment, the overlay over it, then `env` over both."""
        return {**os.environ, **self.env_overlay, **(env or {})}

    def spawn(
        self, argv: Sequence[str], *, log_path: str, env: Mapping[str, str] | None = None
    ) -> int:
        """Start a long-running service in its own session; return its pid."""
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(  # noqa: S603 - argv list, never a shell
                list(argv), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=self._env(env), start_new_session=True,
            )
        return proc.pid


@contextlib.contextmanager
def _command_errors(argv: Sequence[str], timeout_s: float | None) -> Iterator[None]:
    """Starting or waiting for `argv` failed: the typed error, with the shell's exit codes."""
    try:
        yield
    except subprocess.TimeoutExpired as exc:
        raise SlurmTimeoutError(list(argv), timeout_s or 0.0) from exc
    except FileNotFoundError as exc:
        raise SlurmCommandError(list(argv), 127, f"{argv[0]}: command not found") from exc
    except OSError as exc:  # not executable, a folder, ...: the shell's "cannot execute"
        raise SlurmCommandError(list(argv), 126, f"{argv[0]}: cannot run: "
                                                 f"{exc.strerror or exc}") from exc


def _result(argv: Sequence[str], code: int, out: bytes, err: bytes) -> CommandResult:
    # bytes decoded without newline translation; bytes that are not UTF-8 (a job name in
    # Latin-1) come back as surrogates, which encode back to the very same bytes
    return CommandResult(tuple(argv), code, out.decode(*STREAM_BYTES), err.decode(*STREAM_BYTES))


class RelayingRunner(SubprocessRunner):
    """A SubprocessRunner that, inside `relaying()` and on the main thread, passes the SIGTERM
    and SIGHUP this process gets on to the command it runs, and waits for it to end (hsbatch:
    a `kill` of hsbatch reaches sbatch, whose output, the job id with it, is still relayed;
    otherwise sbatch would be left running with nobody reading what it says). A signal this
    process ignores (``nohup``, ``trap '' HUP``) gets no handler: the command inherits the
    ignore, as it would under plain sbatch. ``timeout_s=None``: no time limit (``sbatch
    --wait`` may wait for weeks)."""

    RELAYED = (signal.SIGTERM, signal.SIGHUP)

    def __init__(self, env_overlay: Mapping[str, str] | None = None) -> None:
        super().__init__(env_overlay)
        self._relay = False
        self.relayed: list[int] = []  # the signals passed on, in order

    @contextlib.contextmanager
    def relaying(self) -> Iterator[None]:
        """While inside, `run` passes the RELAYED signals on to its command."""
        self._relay = True
        try:
            yield
        finally:
            self._relay = False

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout_s: float | None = 60.0,
        cwd: str | None = None,
    ) -> CommandResult:
        if not self._relay or threading.current_thread() is not threading.main_thread():
            return self._run(argv, stdin, env, timeout_s, cwd)
        child: list[subprocess.Popen[bytes]] = []
        early: list[int] = []  # came before the command started: passed on once it has

        def relay(signum: int, frame: FrameType | None) -> None:
            self.relayed.append(signum)
            if child:
                with contextlib.suppress(ProcessLookupError):
                    child[0].send_signal(signum)
            else:
                early.append(signum)

        def started(proc: subprocess.Popen[bytes]) -> None:
            child.append(proc)
            for signum in early:
                proc.send_signal(signum)

        previous = {s: signal.signal(s, relay) for s in self.RELAYED if not ignored(s)}
        try:
            return self._run(argv, stdin, env, timeout_s, cwd, started)
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)


def ignored(signum: int) -> bool:
    """Whether this process ignores `signum` (its handler is SIG_IGN)."""
    return signal.getsignal(signum) == signal.SIG_IGN
