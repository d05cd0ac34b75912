"""Two writers of one output path never share a staging file (files.write_together)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from slurm_hase.errors import DataError
from slurm_hase.predict.files import _stage, write_together


def test_two_writers_of_one_path_stage_apart(tmp_path: Path) -> None:
    """A cron refit and a manual one writing the same --out: each renames its own whole file.
    With one fixed staging name the second truncated the first's file, the first rename put
    the second's text in place and the second rename found nothing to rename."""
    out = tmp_path / "site-model.json"
    first = _stage(out, "model A", DataError)
    second = _stage(out, "model B", DataError)
    assert first != second
    first.replace(out)
    assert out.read_text() == "model A"
    second.replace(out)
    assert out.read_text() == "model B"
    assert [p.name for p in tmp_path.iterdir()] == ["site-model.json"]


def test_staged_file_follows_the_umask(tmp_path: Path) -> None:
    """hsbatch users read the model file: it gets a new file's usual mode, not a private one."""
    old = os.umask(0o022)
    try:
        write_together([(tmp_path / "m.json", "{}", DataError)])
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "m.json").stat().st_mode) == 0o644


def test_a_failed_write_leaves_no_staging_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="nodir"):
        write_together([(tmp_path / "nodir" / "rows.csv", "x", DataError)])
    assert list(tmp_path.iterdir()) == []
