"""What a sqlite3 error means to the state store: locked, transient, corrupt, or final.

LOCKED (busy/locked) is retried with backoff; TRANSIENT (disk full, I/O error, read-only file
system, cannot open the journal, out of memory) keeps a write for later, since freeing space or
fixing the disk makes it succeed; CORRUPT (malformed image, not a database) means the file is
not a usable store; FINAL is anything else (a constraint, a bad statement): retrying changes
nothing.
"""

from __future__ import annotations

import sqlite3
from enum import Enum


class Fault(Enum):
    """How the store treats a sqlite3 error."""

    LOCKED = "locked"
    TRANSIENT = "transient"
    CORRUPT = "corrupt"
    FINAL = "final"


# primary result codes (https://sqlite.org/rescode.html)
_BY_CODE: dict[int, Fault] = {
    5: Fault.LOCKED,  # SQLITE_BUSY
    6: Fault.LOCKED,  # SQLITE_LOCKED
    7: Fault.TRANSIENT,  # SQLITE_NOMEM
    8: Fault.TRANSIENT,  # SQLITE_READONLY (e.g. a file system remounted read-only)
    10: Fault.TRANSIENT,  # SQLITE_IOERR
    11: Fault.CORRUPT,  # SQLITE_CORRUPT
    13: Fault.TRANSIENT,  # SQLITE_FULL
    14: Fault.TRANSIENT,  # SQLITE_CANTOPEN (e.g. the journal cannot be created)
    26: Fault.CORRUPT,  # SQLITE_NOTADB
}

# the same by message, for errors that carry no result code
_BY_TEXT: tuple[tuple[str, Fault], ...] = (
    ("database is locked", Fault.LOCKED),
    ("database table is locked", Fault.LOCKED),
    ("database is busy", Fault.LOCKED),
    ("database or disk is full", Fault.TRANSIENT),
    ("disk i/o error", Fault.TRANSIENT),
    ("attempt to write a readonly database", Fault.TRANSIENT),
    ("unable to open database file", Fault.TRANSIENT),
    ("out of memory", Fault.TRANSIENT),
    ("database disk image is malformed", Fault.CORRUPT),
    ("file is not a database", Fault.CORRUPT),
)


def classify(exc: sqlite3.Error) -> Fault:
    """The Fault of `exc`, from its SQLite result code, else from its message."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int) and (code & 0xFF) in _BY_CODE:
        return _BY_CODE[code & 0xFF]
    text = str(exc).lower()
    for words, fault in _BY_TEXT:
        if words in text:
            return fault
    return Fault.FINAL
