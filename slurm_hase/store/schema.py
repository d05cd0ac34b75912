"""The state store's schema: its numbered migrations, and how ownership rows are written."""

from __future__ import annotations

from collections.abc import Mapping

import sqlite_utils

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


# (nice, features) or (nice, features, prev_nice, prev_features): nice/features None keep what
# the store has; the prev pair (None when left out) replaces it
OwnedRow = tuple[int | None, str | None] | tuple[int | None, str | None, int | None, str | None]


def upsert_owned(db: sqlite_utils.Database, owned_updates: Mapping[str, OwnedRow],
                 at: float) -> None:
    """Insert or update ownership rows (OwnedRow) in the owned table, at time `at`."""
    for jid, row in owned_updates.items():
        nice, feats = row[0], row[1]
        prev_nice, prev_feats = (row[2], row[3]) if len(row) == 4 else (None, None)
        db.execute(
            "INSERT INTO owned(job_id, nice, features, updated, prev_nice, prev_features) "
            "VALUES (?,?,?,?,?,?) ON CONFLICT(job_id) DO UPDATE SET "
            "nice=COALESCE(excluded.nice, owned.nice), "
            "features=COALESCE(excluded.features, owned.features), updated=excluded.updated, "
            "prev_nice=excluded.prev_nice, prev_features=excluded.prev_features",
            [jid, nice, feats, at, prev_nice, prev_feats])
