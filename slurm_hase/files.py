"""Files written whole: staged in a new file of their own beside the target, then renamed over it.

A reader never sees half a file (bash running a prolog, node_exporter reading a *.prom file,
hsbatch reading its cache), a failure leaves the old file as it was, and two writers of one
path never write into each other's staging file (.NAME.PID-RANDOM.tmp, created with O_EXCL and
never through a symlink). A replaced file keeps its permission bits (a root cron job under umask
077 must not make a world-readable model file private), and the staged data is on disk before
the rename (a power cut must not leave the new name on an empty file). Every module that
replaces a file goes through here.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

__all__ = ["discard", "replace_whole", "stage_beside"]


def stage_beside(path: str | Path, text: str, *, mode: int | None = None) -> Path:
    """Write `text` (UTF-8, newlines as given) to a new file beside `path`; return it.

    `mode`: the staged file's permission bits; None = those of the regular file at `path` now,
    else a new file's usual ones (0o666 less the umask). The text is synced to disk before this
    returns. OSError propagates, and then no staging file is left."""
    target = Path(path)
    if mode is None:
        mode = _current_mode(target)
    tmp = target.with_name(f".{target.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(tmp, flags, 0o666 if mode is None else 0o600)
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        fh = os.fdopen(fd, "w", encoding="utf-8", newline="")
    except BaseException:
        os.close(fd)
        discard(tmp)
        raise
    try:
        with fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        discard(tmp)
        raise
    return tmp


def _current_mode(path: Path) -> int | None:
    """The permission bits of the regular file at `path` (through a symlink); None if none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) else None


def replace_whole(path: str | Path, text: str, *, mode: int | None = None) -> None:
    """Replace `path` by a file holding `text` in one rename (stage_beside's `mode`: None keeps
    the mode of the file replaced).

    OSError propagates; the old file is then untouched and no staging file is left."""
    tmp = stage_beside(path, text, mode=mode)
    try:
        tmp.replace(path)
    except BaseException:
        discard(tmp)
        raise


def discard(tmp: Path) -> None:
    """Remove a staged file (best effort: it may be gone already)."""
    with contextlib.suppress(OSError):
        if tmp.is_file() or tmp.is_symlink():
            tmp.unlink()
