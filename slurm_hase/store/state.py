"""The daemon's SQLite state store (sqlite-utils): cycles, decisions, ownership, usage, models.

Schema changes are numbered migrations recorded in the `migrations` table. Every write is one
transaction, rolled back on any failure (its COMMIT included), retried with backoff while SQLite
answers "database is locked"/"busy"; a write that still fails on a lock or a transient fault
(disk full, I/O error) stays in an in-memory backlog (at most `max_backlog` writes) that the
next write, flush() and close() write first, so no record is lost while the process lives
(StoreError tells the caller the write is delayed). Reads retry a lock the same way. A
damaged file is a StoreError naming it, never a raw sqlite3 error.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import sqlite_utils

from slurm_hase.errors import StoreError
from slurm_hase.store.faults import Fault, classify
from slurm_hase.store.schema import (
    MIGRATIONS,
    CycleRow,
    DecisionRow,
    OwnedRow,
    check_store_path,
    refuse_newer,
    upsert_owned,
)

__all__ = ["MIGRATIONS", "CycleRow", "DecisionRow", "StateStore", "check_store_path"]

log = logging.getLogger("slurm_hase.store")

Write = Callable[[sqlite_utils.Database], None]
T = TypeVar("T")


class StateStore:
    """Small API over the state database; open with StateStore(path) (":memory:" works; the
    path's folder must exist)."""

    def __init__(self, path: str | Path, *, lock_timeout_s: float = 1.0, attempts: int = 6,
                 backoff_s: float = 0.05, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.time, max_backlog: int = 5000) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            check_store_path(self.path)
        try:
            conn = sqlite3.connect(self.path, timeout=lock_timeout_s, isolation_level=None)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open state store {self.path}: {exc}") from exc
        self.db = sqlite_utils.Database(conn)
        self.attempts = max(attempts, 1)
        self.backoff_s = backoff_s
        self.max_backlog = max(max_backlog, 1)
        self._sleep = sleep
        self._clock = clock
        self._closed = False
        self.backlog: list[Write] = []
        self.dropped = 0  # writes given up on (a final error, or over max_backlog)
        try:
            self._read(lambda: self.db.execute("PRAGMA schema_version").fetchone())
            self._refuse_foreign()
            self._open_migrate()
        except StoreError:
            conn.close()
            raise

    # -- plumbing ---------------------------------------------------------------------

    def tables(self) -> list[str]:
        """The database's tables ([] for a new or empty file)."""
        return self._read(lambda: [str(r[0]) for r in self.db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()])

    def _refuse_foreign(self) -> None:
        """StoreError for another program's SQLite database (tables, none of them ours): a
        mistyped path must not get the store's tables written into it."""
        tables = self.tables()
        if tables and "migrations" not in tables:
            shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
            raise StoreError(f"{self.path} is an SQLite database of something else (tables: "
                             f"{shown}), not a slurm-hase state store; nothing was written "
                             "(fix --state-db / [schedd] state_db)")

    def _applied(self) -> set[int]:
        """The migrations the file has (none for a new or empty file)."""
        if "migrations" not in self.tables():
            return set()
        return self._read(lambda: {int(r[0]) for r in self.db.execute(
            "SELECT version FROM migrations").fetchall()})

    def _open_migrate(self) -> None:
        """Migrate at open, taking the write lock only when a migration is missing: `status`,
        `job` and a starting daemon then open a current store while another process writes it.
        A store that needs migrating and stays locked is a StoreError that keeps nothing."""
        applied = self._applied()
        refuse_newer(self.path, applied)
        if set(range(1, len(MIGRATIONS) + 1)) <= applied:
            return
        try:
            self._attempt(self._migrate)
        except sqlite3.Error as exc:  # not opened: nothing is kept for a retry
            fault = classify(exc)
            if fault is Fault.LOCKED:
                raise StoreError(f"state store {self.path} needs migrating to this version and "
                                 "is locked (another process is writing it); try again") from exc
            if fault is Fault.CORRUPT:
                raise StoreError(self._unusable(exc)) from exc
            raise StoreError(f"state store {self.path} cannot be migrated to this version: "
                             f"{exc}") from exc

    def _migrate(self, db: sqlite_utils.Database) -> None:
        db.execute("CREATE TABLE IF NOT EXISTS migrations (version INTEGER PRIMARY KEY, "
                   "name TEXT NOT NULL, applied_at REAL NOT NULL)")
        done = {int(r[0]) for r in db.execute("SELECT version FROM migrations").fetchall()}
        for version, (name, sql) in enumerate(MIGRATIONS, start=1):
            if version in done:
                continue
            for stmt in (s.strip() for s in sql.split(";")):
                if stmt:
                    db.execute(stmt)
            db.table("migrations").insert({"version": version, "name": name,
                                     "applied_at": self._clock()})

    def _rollback(self) -> None:
        """End any open transaction (SQLite may have rolled it back itself already)."""
        conn = self.db.conn
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error as exc:
                log.error("state store %s: rollback failed: %s", self.path, exc)

    def _transaction(self, fn: Write) -> None:
        """`fn` in one BEGIN IMMEDIATE ... COMMIT; any failure, a busy COMMIT included, rolls
        back, so the connection never stays inside a transaction."""
        self._rollback()
        conn = self.db.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            fn(self.db)
            conn.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise

    def _unusable(self, exc: sqlite3.Error) -> str:
        return (f"{self.path} is not a usable slurm-hase state store ({exc}); move it aside "
                "and the daemon starts a fresh one")

    def _read(self, fn: Callable[[], T]) -> T:
        """`fn()`, retried with backoff while the file is locked; StoreError on any failure."""
        attempt = 0
        while True:
            try:
                return fn()
            except sqlite3.Error as exc:
                fault = classify(exc)
                if fault is Fault.LOCKED and attempt + 1 < self.attempts:
                    self._sleep(self.backoff_s * (2 ** attempt))
                    attempt += 1
                    continue
                if fault is Fault.LOCKED:
                    raise StoreError(f"state store {self.path} is locked (another process "
                                     "is writing it); try again") from exc
                if fault is Fault.CORRUPT:
                    raise StoreError(self._unusable(exc)) from exc
                raise StoreError(f"state store {self.path}: {exc}") from exc

    def _write(self, fn: Write | None) -> None:
        """Queue `fn`, then flush the backlog in order, each in its own retried transaction."""
        if fn is not None:
            self.backlog.append(fn)
            over = len(self.backlog) - self.max_backlog
            if over > 0:
                del self.backlog[:over]
                self.dropped += over
                log.error("state store %s: more than %d writes waiting; the oldest %d dropped",
                          self.path, self.max_backlog, over)
        # one that fails for good is dropped and those behind it are still written (before,
        # they waited for the next write: at close, for none, and were lost)
        dropped: tuple[StoreError, sqlite3.Error] | None = None
        while self.backlog:
            try:
                self._attempt(self.backlog[0])
                self.backlog.pop(0)
            except sqlite3.Error as exc:
                failed = self._write_failed(exc, fault := classify(exc))
                if fault in (Fault.LOCKED, Fault.TRANSIENT):
                    raise failed from exc
                dropped = dropped or (failed, exc)
        if dropped is not None:
            raise dropped[0] from dropped[1]

    def _attempt(self, fn: Write) -> None:
        """`fn` in one transaction, retried with backoff while the file is locked; the last
        sqlite3.Error when it cannot be written."""
        for attempt in range(self.attempts):
            try:
                self._transaction(fn)
                return
            except sqlite3.Error as exc:
                if classify(exc) is Fault.LOCKED and attempt + 1 < self.attempts:
                    self._sleep(self.backoff_s * (2 ** attempt))
                    continue
                raise

    def _write_failed(self, exc: sqlite3.Error, fault: Fault) -> StoreError:
        """The StoreError for a failed write: kept for retry after a lock or a transient fault,
        else dropped (retrying it would fail the same way)."""
        if fault in (Fault.LOCKED, Fault.TRANSIENT):
            what = "is locked" if fault is Fault.LOCKED else f"cannot be written ({exc})"
            log.warning("state store %s %s; %d writes kept for retry", self.path, what,
                        len(self.backlog))
            return StoreError(f"state store {self.path} {what}; {len(self.backlog)} writes kept "
                              "for retry")
        self.backlog.pop(0)
        self.dropped += 1
        why = self._unusable(exc) if fault is Fault.CORRUPT else f"state store {self.path}: {exc}"
        log.error("%s; a write was dropped", why)
        return StoreError(f"{why}; a write was dropped")

    def flush(self) -> None:
        """Write the backlog (writes kept after a lock or a transient fault) now; no-op when
        empty, StoreError when it still cannot be written."""
        self._write(None)

    def close(self) -> None:
        """Write the backlog once more, then close; StoreError (once closed) naming the writes
        lost when it still cannot be written."""
        if self._closed:
            return
        dropped = self.dropped
        try:
            self.flush()
        except StoreError as exc:
            lost = len(self.backlog) + self.dropped - dropped
            self.backlog.clear()
            log.error("state store %s: %d writes lost at close: %s", self.path, lost,
                      exc.__cause__ or exc)
            raise StoreError(f"state store {self.path}: {lost} writes lost at close "
                             f"({exc.__cause__ or exc})") from exc
        finally:
            self._rollback()
            self.db.conn.close()
            self._closed = True

    def schema_version(self) -> int:
        row = self._read(lambda: self.db.execute("SELECT MAX(version) FROM migrations").fetchone())
        return int(row[0] or 0)

    # -- cycles and decisions ---------------------------------------------------------

    def record_cycle(self, cycle: CycleRow, rows: Iterable[DecisionRow],
                     owned_updates: Mapping[str, OwnedRow]) -> None:
        """Store a cycle, its decisions and the attributes we now own, atomically."""
        rows = list(rows)
        owned_updates = dict(owned_updates)
        at = self._clock()

        def write(db: sqlite_utils.Database) -> None:
            cid = db.table("cycles").insert({**cycle.__dict__, "dry_run": int(cycle.dry_run),
                                       "unavailable": int(cycle.unavailable)}).last_pk
            db.table("decisions").insert_all({**r.__dict__, "cycle_id": cid} for r in rows)
            upsert_owned(db, owned_updates, at)

        self._write(write)

    def save_owned(self, owned_updates: Mapping[str, OwnedRow]) -> None:
        """The attributes we are about to set, written before the first scontrol call (a kill
        mid-act then leaves the store knowing what may be in Slurm)."""
        owned_updates = dict(owned_updates)
        if not owned_updates:
            return
        at = self._clock()
        self._write(lambda db: upsert_owned(db, owned_updates, at))

    def cycles(self, limit: int = 10) -> list[dict[str, Any]]:
        """Latest cycles, newest first, each with `requeued`: the running jobs it requeued."""
        sql = ("SELECT c.*, (SELECT COUNT(*) FROM decisions d WHERE d.cycle_id = c.id "
               "AND d.action = 'requeue' AND d.outcome = 'applied') AS requeued "
               "FROM cycles c ORDER BY c.id DESC LIMIT ?")
        return self._read(lambda: list(self.db.query(sql, [limit])))

    def decisions(self, *, job_id: str | None = None, cycle_id: int | None = None,
                  limit: int = 1000) -> list[dict[str, Any]]:
        """Recorded decisions, oldest first, optionally for one job or cycle."""
        where, args = [], []
        if job_id is not None:
            where.append("job_id = ?")
            args.append(job_id)
        if cycle_id is not None:
            where.append("cycle_id = ?")
            args.append(str(cycle_id))
        return self._read(lambda: list(self.db.table("decisions").rows_where(
            " AND ".join(where) or None, args, order_by="id", limit=limit)))

    def job_history(self, job_id: str, limit: int = 20) -> list[dict[str, Any]]:
        """One job's recorded decisions with their cycle's start, policy and dry-run flag,
        newest first."""
        sql = ("SELECT d.*, c.started, c.policy, c.dry_run FROM decisions d "
               "JOIN cycles c ON c.id = d.cycle_id WHERE d.job_id = ? "
               "ORDER BY d.id DESC LIMIT ?")
        return self._read(lambda: list(self.db.query(sql, [job_id, limit])))

    def prune_history(self, before: float) -> None:
        """Drop the cycles that started before `before` (epoch s) and their decisions."""
        def write(db: sqlite_utils.Database) -> None:
            db.execute("DELETE FROM decisions WHERE cycle_id IN "
                       "(SELECT id FROM cycles WHERE started < ?)", [before])
            db.execute("DELETE FROM cycles WHERE started < ?", [before])

        self._write(write)

    # -- ownership (what we set, to tell it from the user's) -------------------------

    def owned(self) -> dict[str, tuple[int | None, str | None]]:
        """job id -> (nice, features) last set by the daemon."""
        return {jid: row[:2] for jid, row in self.owned_rows().items()}

    def owned_rows(self) -> dict[str, tuple[int | None, str | None, int | None, str | None]]:
        """job id -> (nice, features, prev_nice, prev_features): the prev pair is what the
        daemon had set before an update whose outcome it does not know (None: none)."""
        rows = self._read(lambda: list(self.db.table("owned").rows))
        return {r["job_id"]: (r["nice"], r["features"], r.get("prev_nice"),
                              r.get("prev_features")) for r in rows}

    def forget(self, job_ids: Iterable[str]) -> None:
        """Drop ownership records (job finished, or our attributes were reset)."""
        ids = list(job_ids)
        if not ids:
            return

        def write(db: sqlite_utils.Database) -> None:
            db.conn.executemany("DELETE FROM owned WHERE job_id = ?", [(i,) for i in ids])

        self._write(write)

    # -- usage ledger and models -----------------------------------------------------

    def save_usage(self, ledger: Mapping[str, Any], at: float, keep: int = 1000) -> None:
        """Snapshot a UsageLedger.to_dict(); keeps the latest `keep` snapshots."""
        text = json.dumps(ledger, sort_keys=True)

        def write(db: sqlite_utils.Database) -> None:
            db.table("usage_snapshots").insert({"at": at, "ledger": text})
            db.execute("DELETE FROM usage_snapshots WHERE id <= "
                       "(SELECT MAX(id) FROM usage_snapshots) - ?", [keep])

        self._write(write)

    def latest_usage(self) -> dict[str, Any] | None:
        """The latest usage snapshot (None before any)."""
        rows = self._read(lambda: list(self.db.table("usage_snapshots").rows_where(
            order_by="id desc", limit=1)))
        return dict(json.loads(rows[0]["ledger"])) if rows else None

    def last_observed(self) -> float | None:
        """When the daemon last observed Slurm (every cycle, quiet ones too, saves the ledger)."""
        row = self._read(lambda: self.db.execute("SELECT MAX(at) FROM usage_snapshots").fetchone())
        return float(row[0]) if row and row[0] is not None else None

    def record_model(self, path: str, digest: str, info: Mapping[str, Any]) -> None:
        """Note the predictor model in use (only when it differs from the latest)."""
        latest = self.latest_model()
        if latest is not None and latest["digest"] == digest and latest["path"] == path:
            return
        row = {"loaded_at": self._clock(), "path": path, "digest": digest,
               "info": json.dumps(dict(info), sort_keys=True, default=str)}

        def write(db: sqlite_utils.Database) -> None:
            db.table("model_versions").insert(row)

        self._write(write)

    def latest_model(self) -> dict[str, Any] | None:
        """The latest recorded predictor model (None before any)."""
        rows = self._read(lambda: list(self.db.table("model_versions").rows_where(
            order_by="id desc", limit=1)))
        return rows[0] if rows else None
