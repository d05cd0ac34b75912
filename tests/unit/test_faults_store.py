"""Fault audit: the SQLite state store under a reader's lock, a full disk and a corrupt file.

Each test states the promise it checks (store/state.py's docstring: "a write that still fails
stays in an in-memory backlog that the next write flushes first, so no record is lost while the
process lives"; the product brief: a corrupt store gets a clear error, not a traceback).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from slurm_hase.errors import StoreError
from slurm_hase.store.state import CycleRow, DecisionRow, StateStore
from tests.conftest import run_main as _main


def _cycle(policy: str = "fair") -> CycleRow:
    return CycleRow(started=1.0, duration_s=0.1, policy=policy, dry_run=False,
                    inputs_digest="abc", pending=1, running=0, decisions=1, applied=1,
                    skipped=0, errors=0)


def test_a_reader_holding_the_database_at_commit_time_does_not_wedge_the_store(
        tmp_path: Path) -> None:
    """`hase schedd status`, a backup (sqlite3 .backup) or an admin's sqlite3 shell holds a read
    lock (SHARED) while the daemon commits. The store is in rollback-journal mode, so its COMMIT
    answers "database is locked" and, as SQLite documents, the transaction stays open. The next
    attempt's BEGIN IMMEDIATE then fails with "cannot start a transaction within a transaction",
    which is not a lock message, so the write is dropped, and so is every later write, for as
    long as the daemon lives; a restart finds none of them."""
    path = tmp_path / "s.db"
    store = StateStore(path, lock_timeout_s=0.02, attempts=3, backoff_s=0.0, sleep=lambda s: None)
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT * FROM cycles").fetchall()  # holds SHARED until it commits
    with pytest.raises(StoreError):
        store.record_cycle(_cycle("first"), [DecisionRow("1", "d", 40, "a100", "applied")],
                           {"1": (40, "a100")})
    reader.execute("COMMIT")  # the reader is done
    reader.close()
    # the next cycle's write: the lock is gone, so both records must now reach the file
    try:
        store.record_cycle(_cycle("second"), [], {"2": (10, None)})
    except StoreError as exc:
        pytest.fail(f"the store stays wedged after the reader left: {exc}")
    finally:
        store.close()  # what a daemon's exit does: an open transaction is rolled back
    fresh = StateStore(path)
    assert [c["policy"] for c in fresh.cycles()] == ["second", "first"]
    assert fresh.owned() == {"1": (40, "a100"), "2": (10, None)}


def test_a_full_disk_delays_the_write_instead_of_dropping_it(tmp_path: Path) -> None:
    """SQLITE_FULL ("database or disk is full") is transient (the admin frees space), and the
    daemon logs it as "state store write delayed". But _write keeps only locked writes: any
    other error pops the write from the backlog, so the cycle's record and the ownership rows
    (what tells our Nice/Features from the user's) are gone although the process lives on."""
    path = tmp_path / "s.db"
    store = StateStore(path, sleep=lambda s: None)
    pages = store.db.execute("PRAGMA page_count").fetchone()[0]
    store.db.execute(f"PRAGMA max_page_count = {pages}")  # the disk is full now
    owned = {str(i): (40, "a100") for i in range(200)}
    rows = [DecisionRow(j, "d" * 64, 40, "a100", "applied") for j in owned]
    with pytest.raises(StoreError):  # told, as with a lock: the write is delayed
        store.record_cycle(_cycle("while full"), rows, owned)
    store.db.execute("PRAGMA max_page_count = 1073741823")  # space freed
    store.record_cycle(_cycle("after"), [], {})
    assert [c["policy"] for c in store.cycles()] == ["after", "while full"]
    assert store.owned() == owned


def _corrupt_store(path: Path) -> None:
    """A store with some history whose pages past the schema are overwritten (a torn write, a
    bad disk block): the header and the migrations table still read."""
    store = StateStore(path)
    for i in range(300):
        store.record_cycle(_cycle(), [DecisionRow(str(i), "x" * 100, 1, "a100", "applied")],
                           {str(i): (1, "a100")})
    store.close()
    data = bytearray(path.read_bytes())
    for off in range(4096 * 3, len(data), 4096):
        data[off:off + 200] = b"\xff" * 200
    path.write_bytes(bytes(data))


def test_status_on_a_corrupt_store_is_a_clear_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file that is no database at all gets `hase: error: ... file is not a database`; one
    whose pages are damaged passes the open and then dies in a read with a raw
    sqlite3.DatabaseError traceback (reads are not wrapped in StoreError)."""
    path = tmp_path / "s.db"
    _corrupt_store(path)
    try:
        code, _out, err = _main(["schedd", "status", "--state-db", str(path)], capsys)
    except sqlite3.DatabaseError as exc:  # escapes the CLI's HaseError handler
        pytest.fail(f"raw {type(exc).__name__} escapes hase schedd status: {exc}")
    assert code != 0 and err.startswith("hase: error: ") and str(path) in err
    assert "malformed" in err or "corrupt" in err


def test_a_daemon_starting_on_a_corrupt_store_gets_a_store_error(tmp_path: Path) -> None:
    """The daemon reads the stored ledger and ownership at start (Daemon.__init__): a damaged
    store must be a StoreError (the CLI prints it and exits), not a raw sqlite3 exception."""
    from slurm_hase.daemon.cycle import CycleConfig
    from slurm_hase.daemon.fake import FakeBackend
    from slurm_hase.daemon.loop import Daemon, LoopSettings
    from tests.unit.test_daemon_cycle import Clock
    from tests.unit.test_daemon_loop import Est, NiceEverything

    path = tmp_path / "s.db"
    _corrupt_store(path)
    try:
        store = StateStore(path)
        Daemon(FakeBackend(), NiceEverything(), Est(), Clock(), store, CycleConfig(),
               LoopSettings(), shares={"a": 1.0})
    except StoreError:
        return
    except sqlite3.DatabaseError as exc:
        pytest.fail(f"raw {type(exc).__name__} at daemon start: {exc}")
    pytest.fail("a corrupt store was read without any error")


# -- the fixes' edges: close() writes the backlog, locked reads, the backlog's bound -----------

def _locked(path: Path) -> sqlite3.Connection:
    """Another process holding the write lock (EXCLUSIVE) until it rolls back."""
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    return other


def _quick(path: Path, **kw: int) -> StateStore:
    return StateStore(path, lock_timeout_s=0.01, attempts=2, backoff_s=0.0,
                      sleep=lambda s: None, **kw)


def test_close_writes_the_backlog_before_closing(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = _quick(path)
    other = _locked(path)
    with pytest.raises(StoreError, match="1 writes kept for retry"):
        store.record_cycle(_cycle("kept"), [], {"1": (5, None)})
    assert not store.db.conn.in_transaction
    other.execute("ROLLBACK")
    other.close()
    store.close()  # the daemon's exit: nothing more comes to flush the backlog
    fresh = StateStore(path)
    assert [c["policy"] for c in fresh.cycles()] == ["kept"]
    assert fresh.owned() == {"1": (5, None)}


def test_close_says_how_many_writes_it_could_not_save(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = _quick(path)
    other = _locked(path)
    with pytest.raises(StoreError):
        store.record_cycle(_cycle(), [], {})
    with pytest.raises(StoreError, match=r"1 writes lost at close \(database is locked\)"):
        store.close()
    other.execute("ROLLBACK")
    other.close()
    store.close()  # closed once: a second close does nothing
    assert StateStore(path).cycles() == []


def test_a_locked_read_is_retried_then_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    slept: list[float] = []
    store = StateStore(path, lock_timeout_s=0.01, attempts=3, backoff_s=0.01,
                       sleep=slept.append)
    released: list[float] = []

    def release(s: float) -> None:
        released.append(s)
        other.execute("ROLLBACK")

    patient = StateStore(path, lock_timeout_s=0.01, attempts=3, backoff_s=0.0, sleep=release)
    other = _locked(path)
    with pytest.raises(StoreError, match=f"state store {path} is locked"):
        store.owned()
    assert slept == [0.01, 0.02]
    assert patient.owned() == {} and released == [0.0]  # the lock went during the retries


def test_the_backlog_is_bounded_dropping_the_oldest(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = _quick(path, max_backlog=2)
    other = _locked(path)
    for policy in ("a", "b", "c"):
        with pytest.raises(StoreError):
            store.record_cycle(_cycle(policy), [], {})
    assert len(store.backlog) == 2 and store.dropped == 1
    other.execute("ROLLBACK")
    other.close()
    store.flush()
    assert [c["policy"] for c in store.cycles()] == ["c", "b"]
