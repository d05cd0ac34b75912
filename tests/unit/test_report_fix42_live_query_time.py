"""The live report's query time reaches the report: a running job that was suspended counts
from its start to when the report asked sacct, through `build_report` and the command backend.

`build_report` hands its clock reading to `fairness_report(queried_at=...)` for live reports
(none for --input: a saved file does not say when sacct ran)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from slurm_hase.cli import report_cmd
from slurm_hase.reports.window import stamp
from slurm_hase.slurm import commands
from slurm_hase.slurm.command_backend import CommandBackend
from slurm_hase.slurm.parse_sacct_text import parse_sacct_parsable
from slurm_hase.slurm.runner import CommandResult
from slurm_hase.slurm.types import JobState

pytestmark = pytest.mark.usefixtures("utc")  # the window's forms are read in local time

NOW = 1_796_000_000  # the report's clock reading (2026-11-30)
START = NOW - 3600


def _sacct_text() -> str:
    """run-v100 of the 24.11 capture as the backend's sacct prints it an hour into its run,
    3000 s of that hour suspended: End Unknown, ElapsedRaw 600."""
    row = {"JobID": "6", "JobName": "run-v100", "Account": "teamb", "User": "root",
           "State": "RUNNING", "ExitCode": "0:0", "Submit": stamp(START - 2),
           "Eligible": stamp(START - 2), "Start": stamp(START), "End": "Unknown",
           "ElapsedRaw": "600",
           "ReqTRES": "billing=1,cpu=1,gres/gpu:v100=2,gres/gpu=2,mem=8000M,node=1",
           "AllocTRES": "billing=1,cpu=1,gres/gpu:v100=2,gres/gpu=2,node=1",
           "Constraints": "volta", "NodeList": "v100-1", "Partition": "gpu"}
    sep = commands.SACCT_DELIMITER
    return (sep.join(commands.SACCT_FIELDS) + "\n"
            + sep.join(row.get(f, "") for f in commands.SACCT_FIELDS) + "\n")


class Runner:
    """sacct answers _sacct_text(); squeue an empty queue; sacctmgr and scontrol nothing."""

    def run(self, argv: Sequence[str], *, stdin: str | None = None,
            env: Mapping[str, str] | None = None, timeout_s: float = 60.0,
            cwd: str | None = None) -> CommandResult:
        out = {"sacct": _sacct_text(), "squeue": '{"jobs": []}\n'}.get(argv[0], "")
        return CommandResult(tuple(argv), 0, out, "")


def test_live_report_counts_a_suspended_running_job_to_the_query(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.setattr(report_cmd, "_backend",
                        lambda timeout_s: CommandBackend(Runner(), timeout_s=timeout_s))
    rep = report_cmd.build_report("now-1days", None, "", "none", None, None, now=NOW)
    [teamb] = rep.accounts
    assert teamb.gpu_hours == {"v100": pytest.approx(2.0)}  # 2 GPUs x the whole hour


def test_the_sacct_text_is_the_running_job_it_stands_for() -> None:
    [job] = parse_sacct_parsable(_sacct_text(), delimiter=commands.SACCT_DELIMITER)
    assert job.state is JobState.RUNNING
    assert (job.start_time, job.end_time, job.elapsed_s) == (START, None, 600)
    assert job.alloc_gpus == {"v100": 2}
