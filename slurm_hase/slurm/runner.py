"""The one place that runs external processes. Everything else gets a Runner passed in."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
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


_BYTES = ("utf-8", "surrogateescape")


class Runner(Protocol):
    """Runs a command and returns its result; never raises on a non-zero exit."""

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout_s: float = 60.0,
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
        timeout_s: float = 60.0,
        cwd: str | None = None,
    ) -> CommandResult:
        full_env = {**os.environ, **self.env_overlay, **(env or {})}
        try:
            proc = subprocess.run(  # noqa: S603 - argv list, never a shell
                list(argv), input=None if stdin is None else stdin.encode(*_BYTES),
                capture_output=True, env=full_env, timeout=timeout_s, cwd=cwd, check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise SlurmTimeoutError(list(argv), timeout_s) from exc
        except FileNotFoundError as exc:
            raise SlurmCommandError(list(argv), 127, f"{argv[0]}: command not found") from exc
        except OSError as exc:  # not executable, a folder, ...: the shell's "cannot execute"
            raise SlurmCommandError(list(argv), 126, f"{argv[0]}: cannot run: "
                                                     f"{exc.strerror or exc}") from exc
        # bytes decoded without newline translation; bytes that are not UTF-8 (a job name in
        # Latin-1) come back as surrogates, which encode back to the very same bytes
        return CommandResult(tuple(argv), proc.returncode, proc.stdout.decode(*_BYTES),
                             proc.stderr.decode(*_BYTES))

    def spawn(
        self, argv: Sequence[str], *, log_path: str, env: Mapping[str, str] | None = None
    ) -> int:
        """Start a long-running service in its own session; return its pid."""
        full_env = {**os.environ, **self.env_overlay, **(env or {})}
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(  # noqa: S603 - argv list, never a shell
                list(argv), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=full_env, start_new_session=True,
            )
        return proc.pid
