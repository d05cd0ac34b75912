"""A write of the backlog that fails for good (not a lock, not a full disk) is dropped, and the
writes queued behind it are still written. Before, _write stopped at the dropped one: the rest
waited for the next write, and at close, where there is none, they were counted lost although
the file took them."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from slurm_hase.errors import StoreError
from slurm_hase.store.state import CycleRow, DecisionRow, StateStore


def _cycle(policy: str) -> CycleRow:
    return CycleRow(started=1.0, duration_s=0.1, policy=policy, dry_run=False,
                    inputs_digest="abc", pending=1, running=0, decisions=1, applied=1,
                    skipped=0, errors=0)


def _queued_behind_a_failing_write(path: Path) -> StateStore:
    """A store whose backlog holds a usage snapshot (whose table is then dropped: it can never
    be written) and, behind it, a cycle with its ownership rows, both kept after a lock."""
    store = StateStore(path, lock_timeout_s=0.01, attempts=2, backoff_s=0.0,
                       sleep=lambda s: None)
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("BEGIN EXCLUSIVE")  # another process writing: the store is locked
    with pytest.raises(StoreError, match="locked"):
        store.save_usage({"half_life_s": 60.0, "usage": {}}, 5.0)
    with pytest.raises(StoreError, match="locked"):
        store.record_cycle(_cycle("behind"), [DecisionRow("1", "d", 40, "a100", "applied")],
                           {"1": (40, "a100", None, None)})
    reader.execute("DROP TABLE usage_snapshots")
    reader.execute("COMMIT")
    reader.close()
    assert len(store.backlog) == 2
    return store


def test_close_writes_what_is_queued_behind_a_dropped_write(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = _queued_behind_a_failing_write(path)
    with pytest.raises(StoreError, match="1 writes lost at close"):
        store.close()
    fresh = StateStore(path)
    assert [c["policy"] for c in fresh.cycles()] == ["behind"]
    assert fresh.owned() == {"1": (40, "a100")}


def test_the_next_write_goes_past_a_dropped_one(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = _queued_behind_a_failing_write(path)
    with pytest.raises(StoreError, match="; a write was dropped"):
        store.record_cycle(_cycle("next"), [], {})
    assert store.backlog == [] and store.dropped == 1
    assert [c["policy"] for c in store.cycles()] == ["next", "behind"]
    store.close()
