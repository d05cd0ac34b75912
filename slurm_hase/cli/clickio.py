"""Click plumbing the CLI groups share: output files checked up front, a quiet closed pipe."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click


class OutputFile(click.Path):
    """A file the command writes: checked while the options are parsed, before any work starts
    (not a folder, a regular file if it exists, writable, its folder exists and is writable).
    The output is renamed into place, so a device or pipe (``/dev/null``, ``/dev/stdout``, a
    FIFO) would be replaced by a plain file, for root even under /dev: refused."""

    def __init__(self) -> None:
        super().__init__(dir_okay=False, writable=True)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        path = super().convert(value, param, ctx)
        if os.path.exists(path) and not os.path.isfile(path):
            self.fail(f"{os.fsdecode(path)}: not a regular file (the output is written beside "
                      "it and renamed over it)", param, ctx)
        folder = Path(os.fsdecode(path)).parent
        if not folder.is_dir():
            self.fail(f"{os.fsdecode(path)}: folder {str(folder)!r} does not exist", param, ctx)
        if not os.access(folder, os.W_OK | os.X_OK):
            self.fail(f"{os.fsdecode(path)}: folder {str(folder)!r} is not writable", param, ctx)
        return path


def check_distinct(outputs: Sequence[tuple[str, str | None]],
                   inputs: Sequence[tuple[str, str | Path]] = ()) -> None:
    """UsageError when two output options (option, path or None) name the same file, or an
    output names an input the command reads (option, path): each output is staged and renamed
    over its path, so the second rename would fail after the first replaced the file (or a
    registry, or an input's data, would be lost under a model file)."""
    seen: dict[str, str] = {}
    for option, path in outputs:
        if path is None:
            continue
        real = os.path.realpath(path)
        if real in seen:
            raise click.UsageError(f"{option} and {seen[real]} name the same file {path!r}: "
                                   "give each output its own file")
        seen[real] = option
    for option, source in inputs:
        real = os.path.realpath(source)
        if real in seen:
            raise click.UsageError(f"{seen[real]} {str(source)!r} is also {option}: writing it would "
                                   "replace that input; give the output another file")


def reader_gone() -> None:
    """stdout's reader has gone (`hase model gpus | head -1`): what is still buffered goes to
    /dev/null, so the interpreter's last flush cannot fail again."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


class QuietPipeGroup(click.Group):
    """A group whose commands end quietly with exit 0 when their output pipe closes, as Unix
    tools do (`hase model gpus | head -1`)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            reader_gone()
            raise click.exceptions.Exit(0) from None

