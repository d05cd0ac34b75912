"""Parse Slurm's text output: ``scontrol show job|node|partition -o``, ``sinfo --version``,
``scontrol show config`` and shared helpers (hostlists, UTC timestamps, durations).

``sacct -P`` lives in parse_sacct_text.py, ``sacctmgr`` shares in parse_shares.py. Text timestamps
are UTC: Slurm prints local wall-clock time, and the adapter runs every command with TZ=UTC
(command_backend.SLURM_ENV), so the autumn hour that daylight saving time repeats is never
ambiguous.
Slurm ends every record with a newline, so a last line without one was cut mid-record (a killed
or truncated read): it raises SlurmParseError rather than yield a half-parsed record.
Limitation: ``scontrol -o`` does not quote values, so a Comment containing `` Key=`` (a space,
then a capitalised word and ``=``) is cut there. A newline inside a value (a job's name or
comment) splits a one-line record; the lines after it are joined back to it.
"""

from __future__ import annotations

import calendar
import re
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass

from slurm_hase.errors import SlurmParseError
from slurm_hase.slurm import hostlist
from slurm_hase.slurm.gres_used import gpus_in_use
from slurm_hase.slurm.tres import (
    gpu_request,
    gpus_from_tres,
    gres_shard_count,
    mps_from_tres,
    node_gres_counts,
    with_held,
)
from slurm_hase.slurm.types import Job, JobState, Node, Partition, SchedulerDepths

_KEY = re.compile(r"(?:(?<=\s)|^)([A-Z][A-Za-z0-9_:/]*)=")
_NULLS = {"(null)", "N/A"}
_VERSION = re.compile(r"\b(\d+)\.(\d+)(?:\.(\d+))?")


@dataclass(frozen=True)
class SlurmVersion:
    """A parsed ``sinfo --version``."""

    major: int
    minor: int
    micro: int
    text: str

    @property
    def tuple(self) -> tuple[int, int]:
        return (self.major, self.minor)


def parse_version(raw: str) -> SlurmVersion:
    """``slurm-wlm 22.05.8`` / ``slurm 24.11.5`` -> SlurmVersion."""
    m = _VERSION.search(raw or "")
    if not m:
        raise SlurmParseError("sinfo --version", f"no version number in {raw.strip()!r}")
    return SlurmVersion(int(m[1]), int(m[2]), int(m[3] or 0), m.group(0))


def parse_utc_time(value: str) -> int | None:
    """``2026-11-29T22:41:13`` (UTC, as Slurm prints it under TZ=UTC) -> epoch, whatever this
    process's time zone; Unknown/None/N/A/"" -> None."""
    v = value.strip()
    if v in ("", "Unknown", "None", "N/A", "(null)", "0"):
        return None
    try:
        return calendar.timegm(time.strptime(v, "%Y-%m-%dT%H:%M:%S"))
    except ValueError as exc:
        raise SlurmParseError("timestamp", f"bad time {value!r}") from exc


def parse_duration(value: str) -> int | None:
    """Slurm's time forms (sbatch(1), --time) -> seconds: ``MM``, ``MM:SS``, ``HH:MM:SS``,
    ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS``; UNLIMITED/INFINITE/NONE -> None."""
    v = value.strip()
    if v.upper() in ("UNLIMITED", "INFINITE", "NONE", "N/A", "", "PARTITION_LIMIT"):
        return None
    days: int | None = None
    if "-" in v:
        d, _, v = v.partition("-")
        days = _int(d, "duration")
    parts = [_int(p, "duration") for p in v.split(":")]
    if days is not None:  # after days, the fields are hours[:minutes[:seconds]]
        if len(parts) > 3:
            raise SlurmParseError("duration", f"bad duration {value!r}")
        hours, minutes, seconds = (parts + [0, 0])[:3]
        return days * 86400 + hours * 3600 + minutes * 60 + seconds
    if len(parts) == 3:
        secs = parts[0] * 3600 + parts[1] * 60 + parts[2]
    elif len(parts) == 2:
        secs = parts[0] * 60 + parts[1]
    elif len(parts) == 1:
        secs = parts[0] * 60
    else:
        raise SlurmParseError("duration", f"bad duration {value!r}")
    return secs


def _int(value: str, what: str) -> int:
    try:
        return int(value.strip())
    except ValueError as exc:
        raise SlurmParseError(what, f"not an integer: {value!r}") from exc


def expand_hostlist(expr: str) -> list[str]:
    """``a100-[1-2],t4-1`` -> [a100-1, a100-2, t4-1] (zero padding kept)."""
    try:
        return hostlist.expand(expr)
    except ValueError as exc:
        raise SlurmParseError("hostlist", str(exc)) from exc


def parse_kv_line(line: str) -> dict[str, str]:
    """One ``scontrol -o`` record -> {key: value}; values may contain spaces."""
    matches = list(_KEY.finditer(line))
    out: dict[str, str] = {}
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        out.setdefault(m[1], line[m.end():end].strip())
    return out


def complete_lines(raw: str, what: str) -> list[str]:
    """The lines of `raw`, split at "\\n" only (as Slurm writes them: a job name may hold
    characters str.splitlines also breaks at, such as \\x1c or U+2028); SlurmParseError if
    the last one lacks its newline (cut mid-record)."""
    tail = raw[raw.rfind("\n") + 1:]
    if tail.strip():
        raise SlurmParseError(what, f"output ends mid-record, without a newline: {tail[-60:]!r}")
    lines = raw.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _record_lines(raw: str, first_key: str, what: str) -> list[str]:
    """The one-line records of ``scontrol -o``. A value holding a newline (a job's name or
    comment: sbatch takes both) splits its record: a line that does not start with
    `first_key`= after a record continues it, and is joined back with its newline."""
    records: list[str] = []
    for line in complete_lines(raw, what):
        if line.startswith(f"{first_key}="):
            records.append(line)
        elif records:
            records[-1] += "\n" + line
        elif line.strip() and not line.startswith("No jobs in the system"):
            raise SlurmParseError(what, f"line does not start with {first_key}=: {line[:60]!r}")
    return records


def _records(raw: str, first_key: str, what: str) -> list[dict[str, str]]:
    recs: list[dict[str, str]] = []
    for line in _record_lines(raw, first_key, what):
        rec = parse_kv_line(line)
        if not rec.get(first_key):
            raise SlurmParseError(what, f"record without a {first_key}: {line[:60]!r}")
        recs.append(rec)
    return recs


def _need(rec: dict[str, str], keys: tuple[str, ...], what: str) -> None:
    missing = [k for k in keys if k not in rec]
    if missing:
        raise SlurmParseError(what, f"record {next(iter(rec.values()))}: missing {missing}")


def _val(rec: dict[str, str], key: str) -> str:
    v = rec.get(key, "")
    return "" if v in _NULLS else v


_JOB_KEYS = ("JobId", "JobName", "UserId", "Priority", "Nice", "Account", "JobState", "Reason",
             "TimeLimit", "SubmitTime", "StartTime", "EndTime", "Partition", "NodeList", "Features")


def _job(rec: dict[str, str]) -> Job:
    what = "scontrol show job"
    _need(rec, _JOB_KEYS, what)
    state = JobState.parse_live(rec["JobState"])
    priority = _int(rec["Priority"], what)
    why = "" if rec["Reason"] == "None" else rec["Reason"]
    tpj, tpn = _val(rec, "TresPerJob"), _val(rec, "TresPerNode")
    alloc = rec.get("AllocTRES") if "AllocTRES" in rec else (
        None if state is JobState.PENDING else rec.get("TRES"))
    return Job(
        job_id=rec["JobId"],
        name=rec["JobName"],
        # interned: a deep queue then holds one string per account/user (faster passes)
        user=sys.intern(rec["UserId"].split("(")[0]),
        account=sys.intern(rec["Account"]),
        partition=rec["Partition"],
        state=state,
        reason=why,
        priority=priority,
        nice=_int(rec["Nice"], what),
        features=_val(rec, "Features"),
        prefer=_val(rec, "Prefer"),
        tres_per_job=tpj,
        tres_per_node=tpn,
        gpu=gpu_request(tpj, tpn),
        alloc_gpus=gpus_from_tres(alloc),
        nodes=_val(rec, "NodeList"),
        comment=_val(rec, "Comment"),
        submit_time=parse_utc_time(rec["SubmitTime"]),
        eligible_time=parse_utc_time(rec.get("EligibleTime", "")),
        start_time=parse_utc_time(rec["StartTime"]),
        end_time=parse_utc_time(rec["EndTime"]),
        time_limit_s=parse_duration(rec["TimeLimit"]),
        held=state is JobState.PENDING and (priority == 0 or why.startswith("JobHeld")),
        array_job_id=rec.get("ArrayJobId") or None,
        array_task_id=rec.get("ArrayTaskId") or None,
        requeue=rec.get("Requeue") == "1",
        restarts=_int(rec.get("Restarts", "0"), what),
    )


def parse_scontrol_jobs(raw: str) -> list[Job]:
    """``scontrol show job -o`` -> jobs."""
    return [_job(r) for r in _records(raw, "JobId", "scontrol show job")]


_NODE_KEYS = ("NodeName", "State", "Gres", "CPUTot", "CPUAlloc", "AllocTRES")


def _node(rec: dict[str, str]) -> Node:
    what = "scontrol show node"
    _need(rec, _NODE_KEYS, what)
    st = [s.rstrip("*").upper() for s in rec["State"].split("+") if s]
    gpus, mps_total = node_gres_counts(rec["Gres"])
    used = gpus_from_tres(rec["AllocTRES"])
    if set(used) == {""} and len(gpus) == 1:  # accounting lists no types: one type here
        used = {next(iter(gpus)): used[""]}
    # with -d: the GPUs MPS shares and shards hold too
    used = with_held(used, gpus_in_use(_val(rec, "GresUsed") or None, gpus))
    features = _val(rec, "ActiveFeatures") or _val(rec, "AvailableFeatures")
    return Node(
        name=rec["NodeName"],
        state=st[0] if st else "UNKNOWN",
        state_flags=tuple(st[1:]),
        features=tuple(f for f in features.split(",") if f),
        partitions=tuple(p for p in _val(rec, "Partitions").split(",") if p),
        gpus=gpus,
        gpus_alloc=used,
        mps_total=mps_total,
        mps_alloc=mps_from_tres(rec["AllocTRES"]),
        shard_total=gres_shard_count(rec["Gres"]),
        cpus=_int(rec["CPUTot"], what),
        cpus_alloc=_int(rec["CPUAlloc"], what),
        gpus_untracked=(sum(gpus.values()) > 0 and "CfgTRES" in rec
                        and not gpus_from_tres(rec["CfgTRES"])),
    )


def parse_scontrol_nodes(raw: str) -> list[Node]:
    """``scontrol show node -d -o`` (or without -d: no GresUsed, so GPUs held by MPS shares and
    shards read as free) -> nodes sorted by name."""
    return sorted((_node(r) for r in _records(raw, "NodeName", "scontrol show node")),
                  key=lambda n: n.name)


def parse_scontrol_partitions(raw: str) -> list[Partition]:
    """``scontrol show partition -o`` -> partitions."""
    out: list[Partition] = []
    for rec in _records(raw, "PartitionName", "scontrol show partition"):
        _need(rec, ("PartitionName", "Default", "Nodes", "State"), "scontrol show partition")
        out.append(Partition(
            name=rec["PartitionName"],
            nodes=tuple(expand_hostlist(_val(rec, "Nodes"))),
            default=rec["Default"].upper() == "YES",
            state=rec["State"].upper(),
        ))
    return out


def parse_show_config(raw: str) -> dict[str, str]:
    """``scontrol show config``: each ``Key = value`` line (header, section titles and the
    controller status line have no ``=`` and are skipped; the first of a repeated key wins)."""
    out: dict[str, str] = {}
    for line in raw.splitlines():
        key, sep, value = line.partition("=")
        key = key.strip()
        if sep and key and " " not in key:
            out.setdefault(key, value.strip())
    return out


def scheduler_depths(config: Mapping[str, str]) -> SchedulerDepths:
    """bf_max_job_test and default_queue_depth from SchedulerParameters (Slurm's defaults,
    500 and 100, where unset; no backfill depth unless SchedulerType is sched/backfill)."""
    params: dict[str, str] = {}
    raw = config.get("SchedulerParameters", "")
    if raw and raw != "(null)":
        for item in raw.split(","):
            key, sep, value = item.partition("=")
            if sep:
                params[key.strip()] = value.strip()

    def depth(name: str, default: int) -> int:
        value = params.get(name)
        if value is None:
            return default
        if not value.isdigit():
            raise SlurmParseError("scontrol show config", f"SchedulerParameters {name}={value!r} is not a count")
        return int(value)

    backfill = depth("bf_max_job_test", SchedulerDepths.backfill)
    if config.get("SchedulerType", "sched/backfill") != "sched/backfill":
        backfill = 0
    return SchedulerDepths(backfill=backfill, main=depth("default_queue_depth", SchedulerDepths.main))
