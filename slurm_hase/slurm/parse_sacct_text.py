"""Parse ``sacct -P`` text (with its header line) into AccountingRecords.

With the default ``|`` delimiter a Constraints value such as ``a100|v100`` adds fields; surplus
fields are joined back into Constraints (or the last column if Constraints is not shown). Use
commands.SACCT_DELIMITER to avoid the ambiguity altogether. A last line without its newline was
cut mid-record and raises SlurmParseError (its field count alone cannot tell). A newline inside
a value (sacct prints it as it is) splits a record over lines, joined back here by field count.

With ``-D`` (commands.sacct_parsable asks for it) a requeued job is one line per run, all with
the same JobID: the earlier runs in state REQUEUED, each run with its own Submit (the requeue
resets it), Start, End, ElapsedRaw and AllocTRES. Each line is one record here; grouping runs
into jobs is the reader's (reports.fairness.job_runs).

Also here, beside sacct: ``sacctmgr show account`` (the account names; parse_text.py reads the
shares, which leave out root and accounts whose fairshare is ``parent``).
"""

from __future__ import annotations

import re

from slurm_hase.errors import SlurmParseError
from slurm_hase.slurm.parse_text import complete_lines, parse_utc_time
from slurm_hase.slurm.tres import gpus_from_tres, parse_tres_list
from slurm_hase.slurm.types import AccountingRecord, JobState

WHAT = "sacct -P"
REQUIRED = ("JobID", "JobName", "Account", "User", "State")
_JOB_ID = re.compile(r"\d+[\w.+\[\]%,-]*")


def _row(fields: list[str], header: list[str], delimiter: str) -> dict[str, str]:
    extra = len(fields) - len(header)
    if extra < 0:
        raise SlurmParseError(WHAT, f"{len(fields)} fields, header has {len(header)}: {fields[:2]}")
    if extra > 0:
        at = header.index("Constraints") if "Constraints" in header else len(header) - 1
        fields = fields[:at] + [delimiter.join(fields[at:at + extra + 1])] + fields[at + extra + 1:]
    return dict(zip(header, fields, strict=True))


def _elapsed(value: str) -> int:
    v = value.strip()
    if not v:
        return 0
    if not v.isdigit():
        raise SlurmParseError(WHAT, f"ElapsedRaw is not an integer: {value!r}")
    return int(v)


def _record(row: dict[str, str]) -> AccountingRecord:
    alloc = parse_tres_list(row.get("AllocTRES"))
    nodes = row.get("NodeList", "")
    return AccountingRecord(
        job_id=row["JobID"],
        name=row["JobName"],
        account=row["Account"],
        user=row["User"],
        state=JobState.parse(row["State"]),
        exit_code=row.get("ExitCode", ""),
        partition=row.get("Partition", ""),
        submit_time=parse_utc_time(row.get("Submit", "")),
        eligible_time=parse_utc_time(row.get("Eligible", "")),
        start_time=parse_utc_time(row.get("Start", "")),
        end_time=parse_utc_time(row.get("End", "")),
        elapsed_s=_elapsed(row.get("ElapsedRaw", "")),
        req_tres=parse_tres_list(row.get("ReqTRES")),
        alloc_tres=alloc,
        alloc_gpus=gpus_from_tres(alloc),
        constraints=row.get("Constraints", ""),
        nodes="" if nodes in ("None assigned", "(null)") else nodes,
        comment=row.get("Comment", ""),
    )


def _starts_record(line: str, delimiter: str) -> bool:
    """Whether `line` opens a record: a job id (123, 123_4, 123_[1-5%2], 123+0, 123.batch)
    and the delimiter."""
    head, sep, _ = line.partition(delimiter)
    return bool(sep) and _JOB_ID.fullmatch(head) is not None


def _rows(lines: list[str], width: int, delimiter: str, by_job_id: bool) -> list[str]:
    """The records among `lines`. sacct prints a newline inside a value (a job's name or
    comment: sbatch takes both) as it is, which splits the record over lines: a line continues
    the record before it while that is short of fields, or (`by_job_id`: JobID is the first
    column) when it does not open a record with a job id; it is joined back with its newline."""
    rows: list[str] = []
    for line in lines:
        if rows and (rows[-1].count(delimiter) + 1 < width
                     or (by_job_id and not _starts_record(line, delimiter))):
            rows[-1] += "\n" + line
        elif line.strip():
            rows.append(line)
    return rows


def parse_sacct_parsable(raw: str, delimiter: str = "|") -> list[AccountingRecord]:
    """``sacct -P`` output whose first line is the header -> records."""
    lines = complete_lines(raw, WHAT)
    while lines and not lines[0].strip():
        lines.pop(0)
    if not lines:
        return []
    header = lines[0].split(delimiter)
    missing = [k for k in REQUIRED if k not in header]
    if missing:
        raise SlurmParseError(WHAT, f"header lacks {missing}: {lines[0][:80]!r}")
    rows = _rows(lines[1:], len(header), delimiter, by_job_id=header[0] == "JobID")
    return [_record(_row(row.split(delimiter), header, delimiter)) for row in rows]


def parse_sacctmgr_accounts(raw: str) -> set[str]:
    """``sacctmgr show account format=account -P -n`` or ``sacctmgr show assoc cluster=NAME
    format=account -P -n`` (commands.sacctmgr_accounts): one account name a line -> the names."""
    names = set()
    for line in complete_lines(raw, "sacctmgr show account"):
        name = line.strip()
        if "|" in name or " " in name:
            raise SlurmParseError("sacctmgr show account", f"expected one account a line: {line!r}")
        if name:
            names.add(name)
    return names
