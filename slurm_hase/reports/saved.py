"""Read a saved ``sacct --json -a`` file; anything else is a ConfigError naming the file."""

from __future__ import annotations

from pathlib import Path

from slurm_hase.errors import ConfigError, SlurmParseError, not_utf8
from slurm_hase.slurm.parse_json_sacct import parse_sacct_json
from slurm_hase.slurm.types import AccountingRecord

EXPECTED = "expected the output of `sacct --json -a`"


def read_saved_sacct(path: Path, option: str = "--input") -> list[AccountingRecord]:
    """The job allocations in a saved sacct --json file; ConfigError (`option FILE: why`) when
    it cannot be read, is not UTF-8, is empty or is not sacct's JSON."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {option} {path}: {exc.strerror or exc}") from None
    try:
        raw = data.decode("utf-8-sig")  # a UTF-8 byte-order mark is harmless
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{option} {path}: {not_utf8(exc)}; {EXPECTED}") from None
    if not raw.strip():
        raise ConfigError(f"{option} {path}: empty file; {EXPECTED}")
    try:
        return parse_sacct_json(raw)
    except SlurmParseError as exc:
        raise ConfigError(f"{option} {path}: {exc.detail}; {EXPECTED}") from None
