"""Output files written all or nothing: each is staged in a new file of its own beside PATH
(.NAME.PID-RANDOM.tmp), then renamed over it, so a reader never sees half a file, a failure
leaves every older file as it was, and two writers of one path (a cron refit and a manual one)
never write into each other's staging file."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from slurm_hase.errors import HaseError
from slurm_hase.files import discard, stage_beside

# (path, text, the error type that names the path when it cannot be written)
Output = tuple[str | Path, str, type[HaseError]]


def write_together(outputs: Sequence[Output], before_commit: Callable[[], None] | None = None) -> None:
    """Write every output, or none of them: all are staged first, then ``before_commit`` runs
    (e.g. storing a registry version), then each is renamed into place. A failure while staging
    or in ``before_commit`` removes the staged files; a failed rename removes the ones not yet
    renamed. The error names the path."""
    for path, _text, error in outputs:
        if os.path.exists(path) and not os.path.isfile(path):  # a device, pipe or folder
            raise error(f"{path}: cannot write (not a regular file: renaming over it would "
                        "replace it)")
    staged: list[tuple[Path, str | Path, type[HaseError]]] = []
    try:
        for path, text, error in outputs:
            staged.append((_stage(path, text, error), path, error))
        if before_commit is not None:
            before_commit()
    except BaseException:
        for tmp, _path, _error in staged:
            discard(tmp)
        raise
    for i, (tmp, path, error) in enumerate(staged):
        try:
            tmp.replace(path)
        except OSError as exc:
            for later, _path, _error in staged[i:]:
                discard(later)
            raise error(f"{path}: cannot write ({exc.strerror or exc})") from None


def _stage(path: str | Path, text: str, error: type[HaseError]) -> Path:
    """Write ``text`` to a new staging file beside PATH and return it; ``error`` naming the path
    if it fails (no staging file left). A file replaced keeps its mode; a new one follows the umask."""
    try:
        return stage_beside(path, text)
    except OSError as exc:
        raise error(f"{Path(path)}: cannot write ({exc.strerror or exc})") from None
