"""Opening the state store while another process holds its write lock: a current store opens
for reading, and one that needs migrating says so instead of promising a retry."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from slurm_hase.errors import StoreError
from slurm_hase.store.schema import MIGRATIONS
from slurm_hase.store.state import StateStore
from tests.conftest import run_main


def _writing(path: Path) -> sqlite3.Connection:
    """Another process inside a write transaction (RESERVED: readers may still read), as the
    running daemon, a dry run beside it or an admin's sqlite3 shell holds it."""
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    other.execute("DELETE FROM usage_snapshots")
    return other


def _patient(path: Path) -> StateStore:
    return StateStore(path, lock_timeout_s=0.01, attempts=2, backoff_s=0.0, sleep=lambda s: None)


def _first_version_store(path: Path) -> None:
    """A store written by the first release: only migration 1 applied."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                 "applied_at REAL NOT NULL)")
    for stmt in MIGRATIONS[0][1].split(";"):
        if stmt.strip():
            conn.execute(stmt)
    conn.execute("INSERT INTO migrations VALUES (1, 'initial', 0)")
    conn.execute("INSERT INTO owned(job_id, nice, features, updated) VALUES ('5', 3, 'a100', 0)")
    conn.close()


def test_a_current_store_opens_while_another_process_writes_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every open took the write lock to check the migrations, so `hase schedd status` (and
    `job`, and a starting daemon) failed with `state store ... is locked; 1 writes kept for
    retry` whenever another process held a write transaction open, although nothing needed
    writing and the file was readable."""
    path = tmp_path / "s.db"
    StateStore(path).save_owned({"7": (40, "a100")})
    other = _writing(path)
    try:
        assert _patient(path).owned() == {"7": (40, "a100")}
        code, out, err = run_main(["schedd", "status", "--state-db", str(path)], capsys)
        assert code == 0, err
        assert "jobs carrying our Nice/Features: 1" in out
    finally:
        other.execute("ROLLBACK")
        other.close()


def test_an_old_store_that_cannot_be_migrated_under_a_lock_says_so(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _first_version_store(path)
    other = _writing(path)
    try:
        with pytest.raises(StoreError) as err:
            _patient(path)
        assert "needs migrating to this version and is locked" in str(err.value)
        assert "kept for retry" not in str(err.value)
    finally:
        other.execute("ROLLBACK")
        other.close()
    store = _patient(path)  # once the lock is gone, the store is migrated and keeps its rows
    assert store.schema_version() == len(MIGRATIONS)
    assert store.owned_rows() == {"5": (3, "a100", None, None)}
