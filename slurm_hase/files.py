"""Files written whole: staged in a new file of their own beside the target, then renamed over it.

A reader never sees half a file (bash running a prolog, node_exporter reading a *.prom file,
hsbatch reading its cache), a failure leaves the old file as it was, and two writers of one
path never write into each other's staging file (.NAME.PID-RANDOM.tmp, created with O_EXCL and
never through a symlink). Every module that replaces a file goes through here.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

__all__ = ["discard", "replace_whole", "stage_beside"]


def stage_beside(path: str | Path, text: str, *, mode: int | None = None) -> Path:
    """Write `text` (UTF-8, newlines as given) to a new file beside `path`; return it.

    `mode`: the staged file's permission bits; None = a new file's usual ones (0o666 less the
    umask). OSError propagates, and then no staging file is left."""
    target = Path(path)
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
    except BaseException:
        discard(tmp)
        raise
    return tmp


def replace_whole(path: str | Path, text: str, *, mode: int | None = None) -> None:
    """Replace `path` by a file holding `text` in one rename (stage_beside's `mode`).

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
