"""The daemon's SQLite state store (sqlite-utils): cycles, decisions, ownership, usage, models.

Schema changes are numbered migrations recorded in the `migrations` table. Every write is one
transaction retried with backoff while SQLite answers "database is locked"/"busy"; a write
that still fails stays in an in-memory backlog that the next write flushes first, so no record
is lost while the process lives (StoreError tells the caller the write is delayed).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlite_utils

from slurm_hase.errors import StoreError

log = logging.getLogger("slurm_hase.store")

Write = Callable[[sqlite_utils.Database], None]

MIGRATIONS: tuple[tuple[str, str], ...] = (
    ("initial", """
CREATE TABLE cycles (
    id INTEGER PRIMARY KEY AUTOINCREMENT, started REAL NOT NULL, duration_s REAL NOT NULL,
    policy TEXT NOT NULL, dry_run INTEGER NOT NULL, inputs_digest TEXT NOT NULL,
    pending INTEGER NOT NULL, running INTEGER NOT NULL, decisions INTEGER NOT NULL,
    applied INTEGER NOT NULL, skipped INTEGER NOT NULL, errors INTEGER NOT NULL,
    unavailable INTEGER NOT NULL DEFAULT 0);
CREATE TABLE decisions (
    id INTEGER PRIMARY KEY AUTOINCREMENT, cycle_id INTEGER NOT NULL REFERENCES cycles(id),
    job_id TEXT NOT NULL, inputs_digest TEXT NOT NULL, nice INTEGER, features TEXT,
    outcome TEXT NOT NULL, answer TEXT NOT NULL DEFAULT '');
CREATE INDEX decisions_job ON decisions(job_id);
CREATE TABLE owned (
    job_id TEXT PRIMARY KEY, nice INTEGER, features TEXT, updated REAL NOT NULL);
CREATE TABLE usage_snapshots (
    id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, ledger TEXT NOT NULL);
CREATE TABLE model_versions (
    id INTEGER PRIMARY KEY AUTOINCREMENT, loaded_at REAL NOT NULL, path TEXT NOT NULL,
    digest TEXT NOT NULL, info TEXT NOT NULL DEFAULT '{}');
"""),
    ("decision reasons", """
ALTER TABLE decisions ADD COLUMN action TEXT NOT NULL DEFAULT 'update';
ALTER TABLE decisions ADD COLUMN reason TEXT NOT NULL DEFAULT '';
CREATE INDEX cycles_started ON cycles(started);
CREATE INDEX decisions_cycle ON decisions(cycle_id);
"""),
)

_LOCKED = ("database is locked", "database is busy", "database table is locked")


@dataclass(frozen=True)
class DecisionRow:
    """One planned update and what Slurm answered."""

    job_id: str
    inputs_digest: str
    nice: int | None
    features: str | None
    outcome: str  # applied | skipped | error | planned (dry run)
    answer: str = ""  # Slurm's answer, or why the daemon did not make it
    action: str = "update"  # update (Nice/Features of a pending job) | requeue (a running one)
    reason: str = ""  # the policy's own words (Decision.reason)


@dataclass(frozen=True)
class CycleRow:
    """Summary of one cycle."""

    started: float
    duration_s: float
    policy: str
    dry_run: bool
    inputs_digest: str
    pending: int
    running: int
    decisions: int
    applied: int
    skipped: int
    errors: int
    unavailable: bool = False


def check_store_path(path: str | Path) -> None:
    """Refuse (StoreError) a store path that is a folder or whose folder does not exist; the
    store never creates folders, so a mistyped one is not made silently."""
    p = Path(path)
    if p.is_dir():
        raise StoreError(f"state store {p} is a directory, not a database file")
    if not p.parent.is_dir():
        raise StoreError(f"state store {p}: folder {p.parent} does not exist")


class StateStore:
    """Small API over the state database; open with StateStore(path) (":memory:" works; the
    path's folder must exist)."""

    def __init__(self, path: str | Path, *, lock_timeout_s: float = 1.0, attempts: int = 6,
                 backoff_s: float = 0.05, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.time) -> None:
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
        self._sleep = sleep
        self._clock = clock
        self.backlog: list[Write] = []
        self._write(self._migrate)

    # -- plumbing ---------------------------------------------------------------------

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

    def _transaction(self, fn: Write) -> None:
        conn = self.db.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            fn(self.db)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def _write(self, fn: Write | None) -> None:
        """Queue `fn`, then flush the backlog in order, each in its own retried transaction."""
        if fn is not None:
            self.backlog.append(fn)
        while self.backlog:
            head = self.backlog[0]
            for attempt in range(self.attempts):
                try:
                    self._transaction(head)
                    break
                except sqlite3.Error as exc:
                    if not any(m in str(exc).lower() for m in _LOCKED):
                        self.backlog.pop(0)
                        raise StoreError(f"state store {self.path}: {exc}") from exc
                    if attempt + 1 == self.attempts:
                        log.warning("state store locked; %d writes kept for later",
                                    len(self.backlog))
                        raise StoreError(f"state store {self.path} is locked; "
                                         f"{len(self.backlog)} writes kept for retry") from exc
                    self._sleep(self.backoff_s * (2 ** attempt))
            self.backlog.pop(0)

    def flush(self) -> None:
        """Retry writes kept after a lock (no-op when none)."""
        self._write(None)

    def close(self) -> None:
        self.db.conn.close()

    def schema_version(self) -> int:
        row = self.db.execute("SELECT MAX(version) FROM migrations").fetchone()
        return int(row[0] or 0)

    # -- cycles and decisions ---------------------------------------------------------

    def record_cycle(self, cycle: CycleRow, rows: Iterable[DecisionRow],
                     owned_updates: Mapping[str, tuple[int | None, str | None]]) -> None:
        """Store a cycle, its decisions and the attributes we now own, atomically."""
        rows = list(rows)
        owned_updates = dict(owned_updates)
        at = self._clock()

        def write(db: sqlite_utils.Database) -> None:
            cid = db.table("cycles").insert({**cycle.__dict__, "dry_run": int(cycle.dry_run),
                                       "unavailable": int(cycle.unavailable)}).last_pk
            db.table("decisions").insert_all({**r.__dict__, "cycle_id": cid} for r in rows)
            for jid, (nice, feats) in owned_updates.items():
                db.execute(
                    "INSERT INTO owned(job_id, nice, features, updated) VALUES (?,?,?,?) "
                    "ON CONFLICT(job_id) DO UPDATE SET "
                    "nice=COALESCE(excluded.nice, owned.nice), "
                    "features=COALESCE(excluded.features, owned.features), updated=excluded.updated",
                    [jid, nice, feats, at])

        self._write(write)

    def cycles(self, limit: int = 10) -> list[dict[str, Any]]:
        """Latest cycles, newest first, each with `requeued`: the running jobs it requeued."""
        return list(self.db.query(
            "SELECT c.*, (SELECT COUNT(*) FROM decisions d WHERE d.cycle_id = c.id "
            "AND d.action = 'requeue' AND d.outcome = 'applied') AS requeued "
            "FROM cycles c ORDER BY c.id DESC LIMIT ?", [limit]))

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
        return list(self.db.table("decisions").rows_where(" AND ".join(where) or None, args,
                                                    order_by="id", limit=limit))

    def job_history(self, job_id: str, limit: int = 20) -> list[dict[str, Any]]:
        """One job's recorded decisions with their cycle's start, policy and dry-run flag,
        newest first."""
        sql = ("SELECT d.*, c.started, c.policy, c.dry_run FROM decisions d "
               "JOIN cycles c ON c.id = d.cycle_id WHERE d.job_id = ? "
               "ORDER BY d.id DESC LIMIT ?")
        return list(self.db.query(sql, [job_id, limit]))

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
        return {r["job_id"]: (r["nice"], r["features"]) for r in self.db.table("owned").rows}

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
        rows = list(self.db.table("usage_snapshots").rows_where(order_by="id desc", limit=1))
        return dict(json.loads(rows[0]["ledger"])) if rows else None

    def last_observed(self) -> float | None:
        """When the daemon last observed Slurm (every cycle, quiet ones too, saves the ledger)."""
        row = self.db.execute("SELECT MAX(at) FROM usage_snapshots").fetchone()
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
        rows = list(self.db.table("model_versions").rows_where(order_by="id desc", limit=1))
        return rows[0] if rows else None
