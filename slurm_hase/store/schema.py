"""The state store's schema: its numbered migrations, its rows, and how ownership rows are
written."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

import sqlite_utils

from slurm_hase.errors import StoreError

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
    ("ownership while an update's outcome is unknown", """
ALTER TABLE owned ADD COLUMN prev_nice INTEGER;
ALTER TABLE owned ADD COLUMN prev_features TEXT;
"""),
)


# (nice, features, prev_nice, prev_features): a full row, written as it is (None clears the
# value: the daemon sends its in-memory entries whole, so the store equals them after each
# write, a Nice or Features going back to None included). (nice, features): a partial row,
# nice/features None keep what the store has and the prev pair is cleared (no daemon caller)
OwnedRow = tuple[int | None, str | None] | tuple[int | None, str | None, int | None, str | None]

_FULL = ("INSERT INTO owned(job_id, nice, features, updated, prev_nice, prev_features) "
         "VALUES (?,?,?,?,?,?) ON CONFLICT(job_id) DO UPDATE SET nice=excluded.nice, "
         "features=excluded.features, updated=excluded.updated, "
         "prev_nice=excluded.prev_nice, prev_features=excluded.prev_features")
_PARTIAL = ("INSERT INTO owned(job_id, nice, features, updated, prev_nice, prev_features) "
            "VALUES (?,?,?,?,?,?) ON CONFLICT(job_id) DO UPDATE SET "
            "nice=COALESCE(excluded.nice, owned.nice), "
            "features=COALESCE(excluded.features, owned.features), updated=excluded.updated, "
            "prev_nice=excluded.prev_nice, prev_features=excluded.prev_features")


def upsert_owned(db: sqlite_utils.Database, owned_updates: Mapping[str, OwnedRow],
                 at: float) -> None:
    """Insert or update ownership rows (OwnedRow: a full row replaces the stored one, a
    partial one keeps what it leaves as None) in the owned table, at time `at`."""
    for jid, row in owned_updates.items():
        if len(row) == 4:
            db.execute(_FULL, [jid, row[0], row[1], at, row[2], row[3]])
        else:
            db.execute(_PARTIAL, [jid, row[0], row[1], at, None, None])


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


def refuse_newer(path: str, applied: Collection[int]) -> None:
    """StoreError for a store with migrations this version does not know: a newer slurm-hase
    wrote it, and its newer tables or columns would be misread."""
    newer = sorted(v for v in applied if v > len(MIGRATIONS))
    if newer:
        raise StoreError(f"state store {path} has schema version {newer[-1]}, written by a newer "
                         f"slurm-hase (this one knows up to {len(MIGRATIONS)}); nothing was read "
                         "or written: run the newer version, or give this one another file "
                         "(--state-db / [schedd] state_db)")
