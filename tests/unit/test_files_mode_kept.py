"""A file replaced whole keeps its permission bits whatever the writer's umask (a root cron
refit under umask 077 must leave a 0644 model file readable), and its text is synced to disk
before the rename."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_hase.files import replace_whole, stage_beside


@pytest.fixture
def umask_077() -> Iterator[None]:
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


@pytest.mark.usefixtures("umask_077")
@pytest.mark.parametrize("before", [0o644, 0o750, 0o604])
def test_a_replaced_file_keeps_its_mode(tmp_path: Path, before: int) -> None:
    target = tmp_path / "predictor.json"
    target.write_text("old")
    target.chmod(before)
    replace_whole(target, "new")
    assert (target.read_text(), _mode(target)) == ("new", before)


@pytest.mark.usefixtures("umask_077")
def test_a_new_file_follows_the_umask_and_a_mode_asked_wins(tmp_path: Path) -> None:
    replace_whole(tmp_path / "new.json", "{}")
    assert _mode(tmp_path / "new.json") == 0o600
    cache = tmp_path / "cache.json"
    cache.write_text("{}")
    cache.chmod(0o644)
    replace_whole(cache, "{}", mode=0o600)  # hsbatch's cache: private whatever it was
    assert _mode(cache) == 0o600


@pytest.mark.usefixtures("umask_077")
def test_a_model_file_rewritten_under_umask_077_stays_readable(tmp_path: Path) -> None:
    """save_model (hase model train/refit) goes through predict.files.write_together."""
    from slurm_hase.predict.modelfile import load_predictor, save_model

    target = tmp_path / "shared-model.json"
    target.write_text("{}")
    target.chmod(0o644)
    save_model(load_predictor("shipped"), target)
    assert _mode(target) == 0o644 and load_predictor(str(target)) is not None


def test_the_staged_text_is_synced_before_it_is_returned(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        real(fd)
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))

    monkeypatch.setattr(os, "fsync", fsync)
    staged = stage_beside(tmp_path / "t", "text")
    assert synced == [str(staged.resolve())] and staged.read_text() == "text"
