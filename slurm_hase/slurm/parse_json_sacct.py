"""Parse ``sacct --json`` (22.05 and >= 23.02) into AccountingRecords (allocations, not steps).

Known gap of 22.05: its JSON reports a failed job's exit code as 0; ``sacct -P`` has it right.
"""

from __future__ import annotations

from typing import Any

from slurm_hase.slurm.parse_json import epoch, guarded, load_json, num, states, text
from slurm_hase.slurm.tres import gpus_from_tres
from slurm_hase.slurm.types import AccountingRecord, JobState

WHAT = "sacct --json"


def _tres(items: Any) -> dict[str, str]:
    """[{"type": "gres", "name": "gpu:a100", "count": 1}, ...] -> {"gres/gpu:a100": "1"}."""
    out: dict[str, str] = {}
    for item in items or []:
        count = num(item.get("count"))
        if count is None or count < 0:  # energy is null (22.05) or -2 (24.11)
            continue
        kind, name = text(item["type"]), text(item.get("name"))
        key = f"{kind}/{name}" if name else kind
        out[key] = f"{count}M" if kind == "mem" else str(count)
    return out


def _exit_code(value: Any) -> str:
    if not isinstance(value, dict):
        return ""
    rc = num(value.get("return_code")) or 0
    signal = value.get("signal")
    sig = num(signal.get("id")) if isinstance(signal, dict) else None
    return f"{rc}:{sig or 0}"


def _job_id(rec: dict[str, Any]) -> str:
    job_id = str(num(rec["job_id"]))
    array = rec.get("array") or {}
    array_job = num(array.get("job_id"))
    task = num(array.get("task_id"))
    if array_job and task is not None:
        return f"{array_job}_{task}"
    return job_id


def _nodes(value: Any) -> str:
    nodes = text(value)
    return "" if nodes in ("None assigned", "(null)") else nodes


def _record(rec: dict[str, Any]) -> AccountingRecord:
    st = states(rec["state"]["current"])
    t = rec["time"]
    alloc = _tres(rec["tres"].get("allocated"))
    comment = rec.get("comment") or {}
    return AccountingRecord(
        job_id=_job_id(rec),
        name=text(rec.get("name")),
        account=text(rec.get("account")),
        user=text(rec.get("user")),
        state=JobState.parse(st[0] if st else ""),
        exit_code=_exit_code(rec.get("exit_code")),
        partition=text(rec.get("partition")),
        submit_time=epoch(t.get("submission")),
        start_time=epoch(t.get("start")),
        end_time=epoch(t.get("end")),
        elapsed_s=num(t.get("elapsed")) or 0,
        req_tres=_tres(rec["tres"].get("requested")),
        alloc_tres=alloc,
        alloc_gpus=gpus_from_tres(alloc),
        constraints=text(rec.get("constraints")),
        nodes=_nodes(rec.get("nodes")),
        comment=text(comment.get("job")),
    )


def parse_sacct_json(raw: str) -> list[AccountingRecord]:
    """``sacct --json`` of any supported version -> one record per job allocation."""
    return [guarded(WHAT, _record, r) for r in load_json(raw, WHAT, "jobs")]
