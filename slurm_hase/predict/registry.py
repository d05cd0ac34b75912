"""Versioned predictor models in a small SQLite table (sqlite-utils).

Table ``predictor_models``: version (int, primary key), created_at, note, rows, data_sha256,
metrics (JSON), model (the model file's JSON text). To be folded into slurm_hase/store later.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_hase.errors import StoreError, name_some
from slurm_hase.predict.api import Predictor
from slurm_hase.predict.modelfile import model_to_json, predictor_from_json

TABLE = "predictor_models"
COLUMNS: dict[str, type] = {"version": int, "created_at": str, "note": str, "rows": int,
                            "data_sha256": str, "metrics": str, "model": str}


@dataclass(frozen=True)
class ModelVersion:
    """One stored model version (without the model text)."""

    version: int
    created_at: str
    note: str
    rows: int
    data_sha256: str
    metrics: dict[str, Any]


_VERSIONS_SQL = (f"select version, created_at, note, rows, data_sha256, metrics from {TABLE} "
                 "order by version")


def _inspect(p: Path) -> tuple[set[str], list[str]]:
    """(the columns of the registry table, the names of the file's other schema objects), read
    without writing; both empty for a missing or empty file. StoreError when it is not SQLite or
    its registry table lacks columns."""
    if not p.exists():
        return set(), []
    try:
        con = sqlite3.connect(f"{p.resolve().as_uri()}?mode=ro", uri=True)
        try:
            cols = {row[1] for row in con.execute(f"pragma table_info({TABLE})")}
            others = [str(row[0]) for row in con.execute(
                "select name from sqlite_master where name != ? and name not like 'sqlite!_%' "
                "escape '!' order by name", [TABLE])]
        finally:
            con.close()
    except sqlite3.Error as exc:
        raise StoreError(f"{p}: cannot open model registry ({exc})") from None
    if cols and not set(COLUMNS) <= cols:
        raise StoreError(f"{p}: table {TABLE} is not a model registry (lacks column(s) "
                         f"{', '.join(c for c in COLUMNS if c not in cols)})")
    return cols, others


def _version(row: tuple[Any, ...]) -> ModelVersion:
    v, c, n, r, s, m = row
    return ModelVersion(int(v), c, n, int(r), s, json.loads(m or "{}"))


class ModelRegistry:
    """Store and fetch predictor versions in an SQLite file."""

    def __init__(self, db_path: str | Path) -> None:
        import sqlite_utils

        self._path = str(db_path)
        ModelRegistry.check(db_path)  # never add the table to someone else's database
        try:
            self._db = sqlite_utils.Database(str(db_path))
            if TABLE not in self._db.table_names():
                self._db[TABLE].create(COLUMNS, pk="version")  # type: ignore[union-attr]
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{db_path}: cannot open model registry ({exc})") from None

    @staticmethod
    def check(db_path: str | Path) -> None:
        """Refuse (StoreError naming the file) an existing file that is not a usable model
        registry, before any work starts and without writing anything: a file that is not SQLite,
        a ``predictor_models`` table without the registry's columns, or a non-empty SQLite file
        without that table (someone else's database, which saving would add a table to). A
        missing file, an empty one and an SQLite file with nothing in it are fine: saving makes
        them a registry."""
        cols, others = _inspect(Path(db_path))
        if not cols and others:
            raise StoreError(f"{db_path}: not a model registry: an SQLite file with other contents "
                             f"({name_some(others)}) and no {TABLE} table; nothing was written to it (name a "
                             "new file or an existing registry)")

    def save(self, predictor: Predictor, note: str = "", metrics: dict[str, Any] | None = None) -> int:
        """Store a model as the next version; returns the version number."""
        try:
            row = self._db.execute(f"select max(version) from {TABLE}").fetchone()
            version = int(row[0] or 0) + 1
            self._db[TABLE].insert({  # type: ignore[union-attr]
                "version": version,
                "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "note": note,
                "rows": int(predictor.meta.get("rows", 0)),
                "data_sha256": str(predictor.meta.get("data_sha256", "")),
                "metrics": json.dumps(metrics or {}),
                "model": model_to_json(predictor),
            })
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self._path}: cannot store model ({exc})") from None
        return version

    def versions(self) -> list[ModelVersion]:
        """All versions, oldest first."""
        rows = self._db.execute(_VERSIONS_SQL).fetchall()
        return [_version(row) for row in rows]

    @staticmethod
    def read_versions(db_path: str | Path) -> list[ModelVersion]:
        """All versions in an existing file, oldest first, opened read-only (nothing is written,
        a file without the table has none); StoreError when it is missing, not SQLite, or its
        table is not a model registry."""
        p = Path(db_path)
        if not p.is_file():
            raise StoreError(f"{p}: no such model registry file")
        _inspect(p)  # listing another SQLite file finds no versions (and writes nothing)
        try:
            con = sqlite3.connect(f"{p.resolve().as_uri()}?mode=ro", uri=True)
            try:
                if con.execute("select 1 from sqlite_master where type = 'table' and name = ?",
                               [TABLE]).fetchone() is None:
                    return []
                rows = con.execute(_VERSIONS_SQL).fetchall()
            finally:
                con.close()
            return [_version(row) for row in rows]
        except (sqlite3.Error, ValueError, TypeError) as exc:
            raise StoreError(f"{p}: cannot read model registry ({exc})") from None

    def load(self, version: int | None = None) -> Predictor:
        """A stored model (None: the newest); StoreError if there is none."""
        if version is None:
            row = self._db.execute(f"select version, model from {TABLE} order by version desc limit 1").fetchone()
        else:
            row = self._db.execute(f"select version, model from {TABLE} where version = ?", [version]).fetchone()
        if row is None:
            raise StoreError(f"no predictor model version {version if version is not None else '(any)'} stored")
        return predictor_from_json(row[1], f"model registry version {row[0]}")
