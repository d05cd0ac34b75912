"""Files replaced whole (slurm_hase/files.py), and the writers that now go through it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from slurm_hase.files import replace_whole, stage_beside
from slurm_hase.slurm.localcluster.paths import ClusterPaths
from slurm_hase.slurm.localcluster.services import ProcessTable


def test_replace_whole_writes_the_text_with_the_mode_asked(tmp_path: Path) -> None:
    target = tmp_path / "hase-mps-prolog.sh"
    target.write_text("old\n")
    replace_whole(target, "#!/bin/bash\nécho\n", mode=0o755)
    assert target.read_text(encoding="utf-8") == "#!/bin/bash\nécho\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o755
    assert [p.name for p in tmp_path.iterdir()] == ["hase-mps-prolog.sh"]


def test_without_a_mode_the_file_follows_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        replace_whole(tmp_path / "m.json", "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "m.json").stat().st_mode) == 0o640


def test_a_private_mode_is_never_wider_while_staged(tmp_path: Path) -> None:
    """hsbatch's cache (0o600): the staged file is created private, not chmod-ed down later."""
    old = os.umask(0)
    try:
        staged = stage_beside(tmp_path / "cache.json", "{}", mode=0o600)
    finally:
        os.umask(old)
    assert stat.S_IMODE(staged.stat().st_mode) == 0o600
    staged.unlink()


def test_a_failed_rename_keeps_the_old_file_and_leaves_no_staging_file(tmp_path: Path) -> None:
    target = tmp_path / "out"
    target.mkdir()  # a rename of a file over a folder fails
    (target / "kept").write_text("x")
    with pytest.raises(OSError):
        replace_whole(target, "new")
    assert (target / "kept").read_text() == "x"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_two_stagings_of_one_path_never_share_a_file(tmp_path: Path) -> None:
    first = stage_beside(tmp_path / "t", "a")
    second = stage_beside(tmp_path / "t", "b")
    assert first != second
    assert (first.read_text(), second.read_text()) == ("a", "b")


def test_staging_never_writes_through_a_symlink(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                ) -> None:
    """A link planted at the staging name is refused (O_EXCL), not written through."""
    victim = tmp_path / "victim"
    victim.write_text("keep")
    monkeypatch.setattr("slurm_hase.files.secrets.token_hex", lambda n: "fixed")
    (tmp_path / f".t.{os.getpid()}-fixed.tmp").symlink_to(victim)
    with pytest.raises(FileExistsError):
        stage_beside(tmp_path / "t", "evil")
    assert victim.read_text() == "keep"


def test_the_cluster_process_table_is_not_blocked_by_a_stale_staging_name(tmp_path: Path
                                                                           ) -> None:
    """pids.json was staged at one fixed name (pids.tmp): whatever was left there (a folder,
    another run's half-written file) failed or raced every later write."""
    paths = ClusterPaths(tmp_path)
    paths.pids_file.parent.mkdir(parents=True, exist_ok=True)
    paths.pids_file.with_suffix(".tmp").mkdir()
    table = ProcessTable(paths)
    table.record("munged", os.getpid(), "python")
    assert "munged" in table.load()
