"""ModelRegistry.read_versions lists without writing, and refuses what is not a registry."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from slurm_hase.errors import StoreError
from slurm_hase.predict.modelfile import load_predictor
from slurm_hase.predict.registry import TABLE, ModelRegistry


def test_read_versions_writes_nothing(tmp_path: Path) -> None:
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    assert ModelRegistry.read_versions(empty) == []
    assert empty.read_bytes() == b""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.sqlite"]  # no journal left


def test_read_versions_lists_what_save_stored(tmp_path: Path) -> None:
    reg = tmp_path / "models.sqlite"
    registry = ModelRegistry(reg)
    registry.save(load_predictor(), note="a")
    registry.save(load_predictor(), note="b")
    before = reg.read_bytes()
    got = ModelRegistry.read_versions(reg)
    assert [(v.version, v.note) for v in got] == [(1, "a"), (2, "b")]
    assert got == registry.versions()
    assert reg.read_bytes() == before


def test_read_versions_refusals(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no such model registry file"):
        ModelRegistry.read_versions(tmp_path / "missing.sqlite")
    text = tmp_path / "t.txt"
    text.write_text("plain text, not SQLite\n" * 8)
    with pytest.raises(StoreError, match="file is not a database"):
        ModelRegistry.read_versions(text)
    wrong = tmp_path / "wrong.sqlite"
    con = sqlite3.connect(wrong)
    con.execute(f"create table {TABLE} (x)")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="is not a model registry"):
        ModelRegistry.read_versions(wrong)
