"""Assemble one WorkloadDescriptor from a descriptor file, ``#HASE`` lines and ``--hase-*``
options (later sources win: file < script < command line), keeping where each key came from so
an error names the line and the key.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from slurm_hase.errors import DescriptorError
from slurm_hase.hsbatch.script import HaseLine
from slurm_hase.predict.descriptor import (
    INTERNAL_KEYS,
    USER_KEYS,
    WorkloadDescriptor,
    canonical_key,
    key_aliases,
    unknown_key_hint,
)

MAX_DESCRIPTOR_FILE_BYTES = 64 * 1024


class Entry(NamedTuple):
    """One key's value and where it was given."""

    key: str  # as the user typed it
    value: object
    where: str  # e.g. "job.sh line 4: #HASE bs=x", "--hase-batch-size"


def canonical(key: str) -> str | None:
    """The descriptor key ``key`` means (case-insensitive, '-' = '_'); None if unknown."""
    try:
        return canonical_key(key)
    except DescriptorError:
        return None


def alias_names() -> list[str]:
    """Every key name hsbatch recognises (aliases and its own keys, which it then refuses with
    a reason rather than as unknown)."""
    return key_aliases(internal=True)


def known_keys() -> list[str]:
    return list(USER_KEYS)


RUN_LENGTH_BY_EPOCHS = frozenset({"epochs", "steps_per_epoch"})


class Sources:
    """Collects entries source by source; duplicates inside one source are errors."""

    def __init__(self) -> None:
        self.entries: dict[str, Entry] = {}

    def add_source(self, entries: Sequence[Entry]) -> None:
        seen: dict[str, Entry] = {}
        for e in entries:
            canon = canonical(e.key)
            if canon is None:
                raise DescriptorError(
                    f"{e.where}: {e.key}: unknown key ({unknown_key_hint(e.key)}known: "
                    f"{', '.join(known_keys())})"
                )
            if canon in INTERNAL_KEYS:
                raise DescriptorError(
                    f"{e.where}: {e.key}: set by hsbatch itself (the GPU types it constrained the job "
                    "to, which the scheduler daemon may change); to choose GPU types yourself use "
                    "--constraint or --gres=gpu:TYPE:N, which the daemon never changes")
            if canon in seen:
                raise DescriptorError(f"{e.where}: {e.key}: given twice (also {seen[canon].where})")
            seen[canon] = e
        # the run's length is one value given two ways: a later source giving it either way
        # replaces what earlier ones said (iterations=, or epochs= and steps_per_epoch=)
        if "iterations" in seen:
            self.entries.pop("epochs", None)
            self.entries.pop("steps_per_epoch", None)
        elif seen.keys() & RUN_LENGTH_BY_EPOCHS:
            self.entries.pop("iterations", None)
        self.entries.update(seen)

    def __bool__(self) -> bool:
        return bool(self.entries)

    def build(self) -> WorkloadDescriptor:
        """Validate everything together; the error names the source of the failing key."""
        mapping = {canon: e.value for canon, e in self.entries.items()}
        try:
            return WorkloadDescriptor.from_mapping(mapping)
        except DescriptorError as exc:
            raise DescriptorError(self._locate(str(exc))) from None

    def _locate(self, message: str) -> str:
        head = message.split(":", 1)[0].strip()
        canon = canonical(head)
        if canon is None and head in ("epochs", "steps_per_epoch"):
            canon = head
        entry = self.entries.get(canon) if canon else None
        if entry is None and canon == "iterations":
            entry = self.entries.get("epochs") or self.entries.get("steps_per_epoch")
        if entry is None:
            return f"workload description: {message}"
        return f"{entry.where}: {message}"

    def where(self, canon: str) -> str | None:
        e = self.entries.get(canon)
        return e.where if e else None


def script_entries(lines: Sequence[HaseLine], label: str) -> list[Entry]:
    return [Entry(h.key, h.value, f"{label} line {h.lineno}: {h.text}") for h in lines]


def option_entries(pairs: Sequence[tuple[str, str]]) -> list[Entry]:
    return [Entry(k, v, f"--hase-{k}") for k, v in pairs]


def file_entries(path: str) -> list[Entry]:
    """Entries of a descriptor file: a JSON object, or ``key=value`` lines (``#`` comments)."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_DESCRIPTOR_FILE_BYTES + 1)
    except OSError as exc:
        raise DescriptorError(f"--hase-descriptor: cannot read {path!r} ({exc.strerror})") from None
    if len(data) > MAX_DESCRIPTOR_FILE_BYTES:
        raise DescriptorError(
            f"--hase-descriptor: {path!r} is larger than {MAX_DESCRIPTOR_FILE_BYTES} bytes; "
            "the description is oversized"
        )
    text = data.decode("utf-8", "replace")
    if text.lstrip().startswith(("{", "[")):
        return _json_entries(text, path)
    out: list[Entry] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if line.startswith("#HASE"):
            line = line[len("#HASE"):].strip()
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        # "bs = 64" (one pair, spaces allowed) or "bs=64 iterations=100" (as on #HASE lines)
        words = [line] if line.count("=") == 1 else line.split()
        for word in words:
            key, eq, value = word.partition("=")
            if not eq or not key.strip():
                raise DescriptorError(f"{path} line {lineno}: {raw.strip()!r}: {word!r} is not "
                                      "key=value")
            out.append(Entry(key.strip(), value.strip(), f"{path} line {lineno}"))
    return out


def _json_entries(text: str, path: str) -> list[Entry]:
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise DescriptorError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(obj, Mapping):
        raise DescriptorError(f"{path}: must be a JSON object of key: value")
    obj = dict(obj)
    obj.pop("hase", None)  # the job-comment form carries its version
    return [Entry(str(k), v, f"{path} key {k!r}") for k, v in obj.items()]
