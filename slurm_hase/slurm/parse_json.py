"""Parse Slurm's JSON output (22.05 openapi v0.0.38 and >= 23.02 data_parser) into typed objects.

This module holds the shared value helpers and the ``squeue --json`` parser; nodes and sacct live
in parse_json_nodes.py and parse_json_sacct.py. Every malformed input raises SlurmParseError.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from slurm_hase.errors import SlurmParseError
from slurm_hase.slurm.tres import gpu_request, gpus_from_tres
from slurm_hase.slurm.types import Job, JobState

T = TypeVar("T")
_LIVE = frozenset({JobState.PENDING, JobState.RUNNING, JobState.SUSPENDED, JobState.COMPLETING})


def decode(raw: str, what: str) -> dict[str, Any]:
    """Decode `raw` as a JSON object; Slurm-reported errors raise too."""
    try:
        doc = json.loads(raw)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise SlurmParseError(what, f"not valid JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise SlurmParseError(what, f"top level is {type(doc).__name__}, not an object")
    errors = doc.get("errors")
    if errors:
        raise SlurmParseError(what, f"Slurm reported errors: {errors!r}")
    return doc


def reported_errors(raw: str) -> list[str]:
    """Errors Slurm put in a JSON answer (22.05 squeue exits 0 with them when slurmctld is
    down); [] when there are none or `raw` is not a JSON object."""
    try:
        doc = json.loads(raw)
    except (json.JSONDecodeError, RecursionError):
        return []
    errors = doc.get("errors") if isinstance(doc, dict) else None
    if not isinstance(errors, list):
        return []
    out = []
    for err in errors:
        if isinstance(err, dict):
            parts = [str(err.get(k)) for k in ("source", "description", "error") if err.get(k)]
            out.append(": ".join(parts) or json.dumps(err))
        else:
            out.append(str(err))
    return out


def records(doc: dict[str, Any], what: str, list_key: str) -> list[dict[str, Any]]:
    """The list of objects under `list_key`; checks the shape."""
    recs = doc.get(list_key)
    if not isinstance(recs, list) or not all(isinstance(r, dict) for r in recs):
        raise SlurmParseError(what, f"no list of objects under {list_key!r}")
    return recs


def load_json(raw: str, what: str, list_key: str) -> list[dict[str, Any]]:
    """Decode `raw` and return the record list under `list_key`."""
    return records(decode(raw, what), what, list_key)


def guarded(what: str, fn: Callable[[dict[str, Any]], T], record: dict[str, Any]) -> T:
    """Run a record converter, turning any shape surprise into SlurmParseError."""
    try:
        return fn(record)
    except SlurmParseError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        ident = record.get("job_id", record.get("name", "?")) if isinstance(record, dict) else "?"
        raise SlurmParseError(what, f"record {ident}: {type(exc).__name__}: {exc}") from exc


def num(value: Any) -> int | None:
    """A number in either shape: flat (22.05) or {"set", "infinite", "number"}; unset -> None."""
    if value is None:
        return None
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, dict) and "number" in value:
        if not value.get("set", True) or value.get("infinite", False):
            return None
        return num(value["number"])
    raise SlurmParseError("JSON number", f"unexpected value {value!r}")


def signed_nice(value: Any) -> int:
    """A job's Nice (0 when unset). 22.05's squeue --json prints a negative Nice as the unsigned
    32-bit number (-109824000 as 4185143296; captured in local-22.05/squeue-nice.json); Slurm's Nice
    stays within +-(2**31 - 1), so a value of 2**31 or more is that wrap, undone here."""
    nice = num(value) or 0
    return nice - 2**32 if nice >= 2**31 else nice


def epoch(value: Any) -> int | None:
    """Epoch seconds; 0 and unset mean 'not known' (None)."""
    n = num(value)
    return n if n else None


def text(value: Any) -> str:
    """A string field; None -> ""."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    raise SlurmParseError("JSON string", f"unexpected value {value!r}")


def states(value: Any) -> list[str]:
    """A state as a flat string (22.05) or list of flags (>= 23.02) -> upper-case list."""
    if isinstance(value, str):
        return [value.upper()] if value else []
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [v.upper() for v in value]
    raise SlurmParseError("JSON state", f"unexpected value {value!r}")


def reason(value: Any) -> str:
    """Pending reason; Slurm's 'None' becomes ""."""
    r = text(value)
    return "" if r == "None" else r


def is_held(state: JobState, priority: int, why: str, flag: Any = None) -> bool:
    """A job is held if Slurm says so, or (22.05) it pends with priority 0 / a JobHeld reason."""
    if isinstance(flag, bool):
        return flag
    return state is JobState.PENDING and (priority == 0 or why.startswith("JobHeld"))


def _array_ids(rec: dict[str, Any]) -> tuple[str | None, str | None]:
    array_job = num(rec.get("array_job_id"))
    if not array_job:
        return None, None
    task = num(rec.get("array_task_id"))
    if task is not None:
        return str(array_job), str(task)
    task_str = text(rec.get("array_task_string"))
    return str(array_job), task_str or None


def _job(rec: dict[str, Any]) -> Job:
    state_list = states(rec["job_state"])
    state = JobState.parse_live(state_list[0] if state_list else "")
    priority = num(rec.get("priority")) or 0
    why = reason(rec.get("state_reason"))
    tpj, tpn = text(rec.get("tres_per_job")), text(rec.get("tres_per_node"))
    limit = num(rec.get("time_limit"))
    array_job, array_task = _array_ids(rec)
    return Job(
        job_id=str(num(rec["job_id"])),
        name=text(rec.get("name")),
        # interned: a deep queue then holds one string per account/user (faster passes)
        user=sys.intern(text(rec.get("user_name"))),
        account=sys.intern(text(rec.get("account"))),
        partition=text(rec.get("partition")),
        state=state,
        reason=why,
        priority=priority,
        nice=signed_nice(rec.get("nice")),
        features=text(rec.get("features")),
        prefer=text(rec.get("prefer")),
        tres_per_job=tpj,
        tres_per_node=tpn,
        gpu=gpu_request(tpj, tpn),
        alloc_gpus=gpus_from_tres(text(rec.get("tres_alloc_str"))),
        nodes=text(rec.get("nodes")),
        comment=text(rec.get("comment")),
        submit_time=epoch(rec.get("submit_time")),
        eligible_time=epoch(rec.get("eligible_time")),
        start_time=epoch(rec.get("start_time")),
        # Slurm projects start + limit for live jobs (a year out when unlimited); scontrol
        # says Unknown then, and so do we.
        end_time=None if limit is None and state in _LIVE else epoch(rec.get("end_time")),
        time_limit_s=None if limit is None else limit * 60,
        held=is_held(state, priority, why, rec.get("hold")),
        array_job_id=array_job,
        array_task_id=array_task,
        requeue=rec.get("requeue") is True,
        restarts=num(rec.get("restart_cnt")) or 0,
    )


def parse_squeue_json(raw: str) -> list[Job]:
    """``squeue --json`` of any supported version -> jobs (22.05 includes finished ones)."""
    return [guarded("squeue --json", _job, r) for r in load_json(raw, "squeue --json", "jobs")]
