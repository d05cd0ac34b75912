"""State store: migrations, records, ownership, usage, models, and the locked-database path."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from slurm_hase.errors import StoreError
from slurm_hase.store.state import MIGRATIONS, CycleRow, DecisionRow, StateStore


def cyc(policy: str = "fair") -> CycleRow:
    return CycleRow(started=1.0, duration_s=0.1, policy=policy, dry_run=False,
                    inputs_digest="abc", pending=3, running=1, decisions=2, applied=1,
                    skipped=1, errors=0)


def test_migrations_recorded_once(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    st = StateStore(path)
    assert st.schema_version() == len(MIGRATIONS)
    st.close()
    st2 = StateStore(path)  # reopening applies nothing twice
    rows = st2.db.execute("SELECT version, name FROM migrations").fetchall()
    assert rows == [(i + 1, m[0]) for i, m in enumerate(MIGRATIONS)]


def test_record_cycle_and_ownership(tmp_path: Path) -> None:
    st = StateStore(tmp_path / "s.db")
    st.record_cycle(cyc(), [DecisionRow("7", "d7", 50, "a100|v100", "applied"),
                            DecisionRow("8", "d8", None, "t4", "error", "Invalid feature")],
                    {"7": (50, "a100|v100")})
    st.record_cycle(cyc("hase"), [DecisionRow("7", "d7b", 60, None, "applied")], {"7": (60, None)})
    assert [c["policy"] for c in st.cycles()] == ["hase", "fair"]
    assert st.owned() == {"7": (60, "a100|v100")}  # features kept when only nice changed
    rows = st.decisions(job_id="7")
    assert [r["nice"] for r in rows] == [50, 60]
    assert st.decisions(job_id="8")[0]["answer"] == "Invalid feature"
    st.forget(["7"])
    assert st.owned() == {}


def test_usage_and_model_versions() -> None:
    st = StateStore(":memory:")
    assert st.latest_usage() is None
    for i in range(5):
        st.save_usage({"half_life_s": 60.0, "last_time": float(i), "usage": {"a": i}}, float(i),
                      keep=3)
    assert st.latest_usage() == {"half_life_s": 60.0, "last_time": 4.0, "usage": {"a": 4}}
    assert st.db.execute("SELECT COUNT(*) FROM usage_snapshots").fetchone()[0] == 3
    st.record_model("/m.json", "d1", {"kind": "forest"})
    st.record_model("/m.json", "d1", {"kind": "forest"})
    st.record_model("/m.json", "d2", {})
    assert st.db.execute("SELECT digest FROM model_versions").fetchall() == [("d1",), ("d2",)]


def test_locked_database_retries_then_keeps_the_record(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    sleeps: list[float] = []
    st = StateStore(path, lock_timeout_s=0.01, attempts=3, backoff_s=0.01,
                    sleep=sleeps.append)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
    with pytest.raises(StoreError, match="locked"):
        st.record_cycle(cyc("first"), [DecisionRow("1", "d", 5, None, "applied")], {"1": (5, None)})
    assert sleeps == [0.01, 0.02]  # bounded, exponential
    assert len(st.backlog) == 1
    other.execute("ROLLBACK")
    other.close()
    st.record_cycle(cyc("second"), [], {})  # flushes the kept write first, in order
    assert st.backlog == []
    assert [c["policy"] for c in st.cycles()] == ["second", "first"]
    assert st.owned() == {"1": (5, None)}
    assert len(st.decisions()) == 1


def test_lock_released_during_retry_loses_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    other = sqlite3.connect(path, isolation_level=None)

    def release(_s: float) -> None:
        if other.in_transaction:
            other.execute("ROLLBACK")

    st = StateStore(path, lock_timeout_s=0.01, attempts=5, backoff_s=0.0, sleep=release)
    other.execute("BEGIN EXCLUSIVE")
    st.record_cycle(cyc(), [DecisionRow("1", "d", 5, None, "applied")], {})
    assert len(st.cycles()) == 1 and st.backlog == []


def test_other_sqlite_errors_are_store_errors(tmp_path: Path) -> None:
    st = StateStore(tmp_path / "s.db")
    st.db.conn.execute("CREATE TRIGGER boom BEFORE INSERT ON decisions "
                       "BEGIN SELECT RAISE(ABORT, 'boom'); END")
    with pytest.raises(StoreError, match="boom"):
        st.record_cycle(cyc(), [DecisionRow("1", "d", 5, None, "applied")], {})
    assert st.backlog == [] and st.cycles() == []  # rolled back as a whole


def test_a_store_written_by_a_newer_slurm_hase_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    """Before, an older daemon opened it and wrote its rows beside tables and columns it does
    not know (a downgrade after an upgrade's migration)."""
    path = tmp_path / "s.db"
    StateStore(path).close()
    newer = len(MIGRATIONS) + 1
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO migrations(version, name, applied_at) VALUES (?, 'later', 1.0)",
                     (newer,))
    conn.close()
    before = path.read_bytes()
    with pytest.raises(StoreError) as err:
        StateStore(path)
    assert (f"has schema version {newer}, written by a newer slurm-hase (this one knows up to "
            f"{len(MIGRATIONS)}); nothing was read or written") in str(err.value)
    assert path.read_bytes() == before
