"""One daemon per state store: `hase schedd run` holds an exclusive lock on STATE_DB.lock.

Two daemons on one store would both set Nice/Features on the same jobs from two ledgers, and
`hase schedd reset` under a running daemon is undone at its next cycle. The lock is flock(2)
on a file beside the store, holding the holder's pid: the kernel drops it when the process
ends, however it ends, so a crash never leaves a stale lock behind. An in-memory store
(":memory:") belongs to its one process: there is nothing to hold and nobody else to find.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from slurm_hase.errors import DaemonRunningError, StoreError

IN_MEMORY = ":memory:"


def lock_path(state_db: str | Path) -> Path:
    """The lock file of a state store, beside the file it names (a symlink to a store and the
    store itself share one lock, so two daemons cannot run on one store through a link)."""
    return Path(f"{os.path.realpath(state_db)}.lock")


class StoreLock:
    """An exclusive hold on a state store for this process (released on close or exit)."""

    def __init__(self, state_db: str | Path) -> None:
        self.path = lock_path(state_db)
        self._fd: int | None = None
        if str(state_db) == IN_MEMORY:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreError(f"cannot open lock file {self.path}: {exc.strerror or exc}") from exc
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(self._fd)
            self.close()
            raise DaemonRunningError(
                f"another hase schedd{f' (pid {pid})' if pid else ''} is running on {state_db} "
                f"(it holds {self.path}); stop it first (systemctl stop hase-schedd), or use "
                "--dry-run, which changes nothing") from None
        os.ftruncate(self._fd, 0)
        os.write(self._fd, f"{os.getpid()}\n".encode())

    def close(self) -> None:
        """Release the hold (the file stays; an unlocked file holds nothing)."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def __enter__(self) -> StoreLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def holder(state_db: str | Path) -> int | None:
    """The pid of the daemon holding `state_db` now (0 when its pid is unreadable), or None."""
    if str(state_db) == IN_MEMORY:
        return None
    try:
        fd = os.open(lock_path(state_db), os.O_RDONLY)
    except OSError:
        return None  # no lock file: no daemon has run on this store here
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_pid(fd) or 0
        return None
    finally:
        os.close(fd)


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
