"""Parse ``sacct --json`` (22.05 and >= 23.02) into AccountingRecords (allocations, not steps).

A record of the wrong shape raises SlurmParseError naming the record and the field, e.g.
``record 3 (job 143): field 'state': expected an object, got 5``.

Known gap of 22.05: its JSON reports a failed job's exit code as 0; ``sacct -P`` has it right.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from slurm_hase.errors import SlurmParseError
from slurm_hase.slurm.parse_json import epoch, load_json, num, states, text
from slurm_hase.slurm.tres import gpus_from_tres
from slurm_hase.slurm.types import AccountingRecord, JobState

WHAT = "sacct --json"


class _BadField(Exception):
    """One field of a record has the wrong shape; parse_sacct_json adds which record."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"field {path!r}: {problem}")


def _show(value: Any) -> str:
    """A value as JSON text, cut to 60 characters, for error messages."""
    shown = json.dumps(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def _get(obj: dict[str, Any], key: str, path: str) -> Any:
    """A required key's value."""
    if key not in obj:
        raise _BadField(path, "missing")
    return obj[key]


def _object(value: Any, path: str, optional: bool = False) -> dict[str, Any]:
    """An object; with `optional`, null (or an empty value) is {}."""
    if optional and not value:
        return {}
    if not isinstance(value, dict):
        raise _BadField(path, f"expected an object, got {_show(value)}")
    return value


def _num(value: Any, path: str) -> int | None:
    try:
        return num(value)
    except SlurmParseError:
        raise _BadField(path, f"expected a number, got {_show(value)}") from None


def _text(value: Any, path: str) -> str:
    try:
        return text(value)
    except SlurmParseError:
        raise _BadField(path, f"expected a string, got {_show(value)}") from None


def _epoch(value: Any, path: str) -> int | None:
    _num(value, path)  # checks the shape
    return epoch(value)


def _tres(items: Any, path: str) -> dict[str, str]:
    """[{"type": "gres", "name": "gpu:a100", "count": 1}, ...] -> {"gres/gpu:a100": "1"}."""
    if items is None:
        return {}
    if not isinstance(items, list):
        raise _BadField(path, f"expected a list, got {_show(items)}")
    out: dict[str, str] = {}
    for i, raw in enumerate(items):
        item = _object(raw, f"{path}[{i}]")
        count = _num(item.get("count"), f"{path}[{i}].count")
        if count is None or count < 0:  # energy is null (22.05) or -2 (24.11)
            continue
        kind = _text(_get(item, "type", f"{path}[{i}].type"), f"{path}[{i}].type")
        name = _text(item.get("name"), f"{path}[{i}].name")
        key = f"{kind}/{name}" if name else kind
        out[key] = f"{count}M" if kind == "mem" else str(count)
    return out


def _exit_code(value: Any) -> str:
    if not isinstance(value, dict):
        return ""
    rc = _num(value.get("return_code"), "exit_code.return_code") or 0
    signal = value.get("signal")
    sig = _num(signal.get("id"), "exit_code.signal.id") if isinstance(signal, dict) else None
    return f"{rc}:{sig or 0}"


def _job_id(rec: dict[str, Any]) -> str:
    job_id = _num(_get(rec, "job_id", "job_id"), "job_id")
    if job_id is None:
        raise _BadField("job_id", "expected a number, got null")
    array = _object(rec.get("array"), "array", optional=True)
    array_job = _num(array.get("job_id"), "array.job_id")
    task = _num(array.get("task_id"), "array.task_id")
    if array_job and task is not None:
        return f"{array_job}_{task}"
    pending = _task_ranges(array.get("task"))
    if array_job and pending:  # the record of an array's tasks still pending, as sacct -P names it
        return f"{array_job}_[{pending}]"
    return str(job_id)


def _task_ranges(value: Any) -> str:
    """A pending array's tasks (24.11: ``"0xE"``, a bitmap with bit i for task i) as ranges,
    ``1-3``; "" when there are none or they do not read."""
    if not isinstance(value, str) or not value.lower().startswith("0x"):
        return ""
    try:
        bits = int(value, 16)
    except ValueError:
        return ""
    return task_ranges(i for i in range(bits.bit_length()) if bits >> i & 1)


def task_ranges(tasks: Iterable[int]) -> str:
    """Ascending task ids as Slurm's ranges: ``1,2,3,5`` -> ``1-3,5``."""
    runs: list[list[int]] = []
    for t in tasks:
        if runs and runs[-1][1] == t - 1:
            runs[-1][1] = t
        else:
            runs.append([t, t])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _nodes(value: Any) -> str:
    nodes = _text(value, "nodes")
    return "" if nodes in ("None assigned", "(null)") else nodes


def _states(value: Any) -> list[str]:
    try:
        return states(value)
    except SlurmParseError:
        raise _BadField("state.current", "expected a string or a list of strings, "
                                         f"got {_show(value)}") from None


# Slurm's state flags that name an accounting record, as sacct's text shows it (job_state_string
# gives a set flag before the base state): 24.11's JSON lists the base state and the flags (an
# earlier run of a requeued job is ["PENDING", "REQUEUED"]), 22.05's JSON the one name
_REQUEUE_FLAGS = frozenset({"REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD"})


def _accounting_state(names: list[str]) -> JobState:
    """The record's state as sacct prints it: REQUEUED for a run ended by a requeue."""
    if _REQUEUE_FLAGS.intersection(names):
        return JobState.REQUEUED
    return JobState.parse(names[0] if names else "")


def _record(rec: dict[str, Any]) -> AccountingRecord:
    state = _object(_get(rec, "state", "state"), "state")
    st = _states(_get(state, "current", "state.current"))
    t = _object(_get(rec, "time", "time"), "time")
    tres = _object(_get(rec, "tres", "tres"), "tres")
    alloc = _tres(tres.get("allocated"), "tres.allocated")
    comment = _object(rec.get("comment"), "comment", optional=True)
    return AccountingRecord(
        job_id=_job_id(rec),
        name=_text(rec.get("name"), "name"),
        account=_text(rec.get("account"), "account"),
        user=_text(rec.get("user"), "user"),
        state=_accounting_state(st),
        exit_code=_exit_code(rec.get("exit_code")),
        partition=_text(rec.get("partition"), "partition"),
        submit_time=_epoch(t.get("submission"), "time.submission"),
        eligible_time=_epoch(t.get("eligible"), "time.eligible"),
        start_time=_epoch(t.get("start"), "time.start"),
        end_time=_epoch(t.get("end"), "time.end"),
        elapsed_s=_num(t.get("elapsed"), "time.elapsed") or 0,
        req_tres=_tres(tres.get("requested"), "tres.requested"),
        alloc_tres=alloc,
        alloc_gpus=gpus_from_tres(alloc),
        constraints=_text(rec.get("constraints"), "constraints"),
        nodes=_nodes(rec.get("nodes")),
        comment=_text(comment.get("job"), "comment.job"),
    )


def _which(index: int, rec: dict[str, Any]) -> str:
    """`record 3` (1-based, in the file's order), with `(job 143)` when its id reads."""
    job_id = rec.get("job_id")
    if isinstance(job_id, dict):
        job_id = job_id.get("number")
    shown = f" (job {job_id})" if isinstance(job_id, int) and not isinstance(job_id, bool) else ""
    return f"record {index}{shown}"


def parse_sacct_json(raw: str) -> list[AccountingRecord]:
    """``sacct --json`` of any supported version -> one record per job allocation."""
    out = []
    for index, rec in enumerate(load_json(raw, WHAT, "jobs"), start=1):
        try:
            out.append(_record(rec))
        except (_BadField, SlurmParseError) as exc:
            raise SlurmParseError(WHAT, f"{_which(index, rec)}: {exc}") from exc
    return out
