"""Slurm's times cross the adapter as UTC whatever hase's own time zone: the adapter runs every
Slurm command with TZ=UTC, reads the stamps Slurm prints as UTC and hands sacct UTC window bounds,
so the autumn hour that daylight saving time repeats is two hours, not one ambiguous one."""

from __future__ import annotations

import calendar
import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest

from slurm_hase.cli import report_cmd
from slurm_hase.reports.window import local_stamp, stamp, window
from slurm_hase.slurm import commands
from slurm_hase.slurm.command_backend import SLURM_ENV, CommandBackend
from slurm_hase.slurm.parse_sacct_text import parse_sacct_parsable
from slurm_hase.slurm.parse_text import parse_scontrol_jobs, parse_utc_time
from slurm_hase.slurm.runner import CommandResult, SubprocessRunner
from tests.conftest import run_main, slurm_capture

BERLIN = "Europe/Berlin"
# 2026-10-25: Berlin's clocks go back from 03:00 CEST to 02:00 CET (01:00 UTC): 02:30 twice
FIRST_0230 = calendar.timegm((2026, 10, 25, 0, 30, 0, 0, 0, 0))  # 02:30 CEST
SECOND_0230 = FIRST_0230 + 3600  # 02:30 CET
# 2026-03-29: Berlin's clocks go forward from 02:00 CET to 03:00 CEST (01:00 UTC): no 02:30
AFTER_SPRING_GAP = calendar.timegm((2026, 3, 29, 1, 30, 0, 0, 0, 0))  # 03:30 CEST


@pytest.fixture()
def berlin(in_zone: Callable[[str], None]) -> None:
    """hase runs in Berlin, where 02:30 on 2026-10-25 happens twice (checked: no tzdata, no
    test)."""
    in_zone(BERLIN)
    first, second = time.localtime(FIRST_0230), time.localtime(SECOND_0230)
    assert (first.tm_hour, first.tm_min, first.tm_isdst) == (2, 30, 1)
    assert (second.tm_hour, second.tm_min, second.tm_isdst) == (2, 30, 0)


def _sacct_text(rows: Sequence[Mapping[str, str]]) -> str:
    """sacct -P text as the backend asks for it (its fields and delimiter)."""
    sep = commands.SACCT_DELIMITER
    lines = [sep.join(commands.SACCT_FIELDS)]
    lines += [sep.join(row.get(f, "") for f in commands.SACCT_FIELDS) for row in rows]
    return "\n".join(lines) + "\n"


# submitted and started at the first 02:30, ended at the second: one hour on one A100
HOUR_ACROSS = {"JobID": "7", "JobName": "dst", "Account": "teama", "User": "root",
               "State": "COMPLETED", "ExitCode": "0:0", "Submit": "2026-10-25T00:30:00",
               "Eligible": "2026-10-25T00:30:00", "Start": "2026-10-25T00:30:00",
               "End": "2026-10-25T01:30:00", "ElapsedRaw": "3600",
               "ReqTRES": "billing=1,cpu=1,gres/gpu:a100=1,gres/gpu=1,node=1",
               "AllocTRES": "billing=1,cpu=1,gres/gpu:a100=1,gres/gpu=1,node=1",
               "NodeList": "a100-1", "Partition": "gpu"}


@pytest.mark.usefixtures("berlin")
def test_a_stamp_of_the_repeated_hour_reads_as_its_one_instant() -> None:
    assert parse_utc_time("2026-10-25T00:30:00") == FIRST_0230
    assert parse_utc_time("2026-10-25T01:30:00") == SECOND_0230
    assert parse_utc_time("2026-03-29T01:30:00") == AFTER_SPRING_GAP
    assert parse_utc_time("Unknown") is None and parse_utc_time("None") is None


@pytest.mark.usefixtures("berlin")
def test_sacct_text_of_a_job_across_the_repeated_hour() -> None:
    [rec] = parse_sacct_parsable(_sacct_text([HOUR_ACROSS]),
                                 delimiter=commands.SACCT_DELIMITER)
    assert (rec.submit_time, rec.start_time, rec.end_time) == (FIRST_0230, FIRST_0230,
                                                               SECOND_0230)
    assert (rec.end_time or 0) - (rec.start_time or 0) == rec.elapsed_s == 3600


@pytest.mark.usefixtures("berlin")
def test_scontrol_text_of_a_job_across_the_repeated_hour(fixtures_dir: Path) -> None:
    """done-t4 of the 22.05 capture, its times moved to the repeated hour."""
    [line] = [ln for ln in slurm_capture(fixtures_dir, "22.05", "scontrol-show-job.txt")
              .splitlines() if " JobName=done-t4 " in ln]
    line = re.sub(r"\b(Submit|Eligible|Accrue|Start)Time=\S+", r"\1Time=2026-10-25T00:30:00",
                  line)
    line = re.sub(r"\bEndTime=\S+", "EndTime=2026-10-25T01:30:00", line)
    [job] = parse_scontrol_jobs(line + "\n")
    assert (job.submit_time, job.eligible_time, job.start_time, job.end_time) == (
        FIRST_0230, FIRST_0230, FIRST_0230, SECOND_0230)


@pytest.mark.usefixtures("berlin")
def test_window_bounds_in_the_repeated_hour_reach_sacct_apart() -> None:
    assert local_stamp(FIRST_0230) == local_stamp(SECOND_0230) == "2026-10-25T02:30:00"
    first, second = stamp(FIRST_0230), stamp(SECOND_0230)
    assert (first, second) == ("2026-10-25T00:30:00", "2026-10-25T01:30:00")
    assert (parse_utc_time(first), parse_utc_time(second)) == (FIRST_0230, SECOND_0230)
    # spring: a UTC stamp for every instant, the local hour that never was included
    assert stamp(AFTER_SPRING_GAP - 3600) == "2026-03-29T00:30:00"
    assert parse_utc_time(stamp(AFTER_SPRING_GAP - 3600)) == AFTER_SPRING_GAP - 3600


@pytest.mark.usefixtures("berlin")
def test_the_users_window_is_read_in_their_zone_and_handed_to_sacct_in_utc() -> None:
    lo, hi = window("2026-10-25T00:00", "2026-10-25T04:00", now=SECOND_0230 + 86400)
    assert (lo, hi) == (FIRST_0230 - 9000, SECOND_0230 + 5400)  # 00:00 CEST, 04:00 CET
    assert (stamp(lo), stamp(hi)) == ("2026-10-24T22:00:00", "2026-10-25T03:00:00")


class RecordingRunner:
    """Answers sacct with HOUR_ACROSS and squeue with an empty queue; records argv and env."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[str, ...], Mapping[str, str] | None]] = []

    def run(self, argv: Sequence[str], *, stdin: str | None = None,
            env: Mapping[str, str] | None = None, timeout_s: float | None = 60.0,
            cwd: str | None = None) -> CommandResult:
        self.calls.append((tuple(argv), env))
        out = {"sacct": _sacct_text([HOUR_ACROSS]), "squeue": '{"jobs": []}\n'}.get(argv[0], "")
        return CommandResult(tuple(argv), 0, out, "")


def test_the_backend_runs_slurm_in_utc() -> None:
    runner = RecordingRunner()
    backend = CommandBackend(runner)
    backend.accounting(since="now-1day", until="now")
    backend.jobs()
    assert SLURM_ENV["TZ"] == "UTC"
    assert [env and env.get("TZ") for _, env in runner.calls] == ["UTC", "UTC"]


@pytest.mark.usefixtures("berlin")
def test_the_live_report_asks_sacct_for_utc_bounds_and_counts_the_hour(
        monkeypatch: pytest.MonkeyPatch) -> None:
    runner = RecordingRunner()
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.setattr(report_cmd, "_backend",
                        lambda timeout_s: CommandBackend(runner, timeout_s=timeout_s))
    rep = report_cmd.build_report("2026-10-25T00:00", "2026-10-25T04:00", "", "none", None,
                                  None, now=SECOND_0230 + 86400)
    [sacct] = [argv for argv, _ in runner.calls if argv[0] == "sacct"]
    bounds = sacct[sacct.index("-S") + 1], sacct[sacct.index("-E") + 1]
    assert bounds == ("2026-10-24T22:00:00", "2026-10-25T03:00:00")
    [teama] = rep.accounts
    assert teama.gpu_hours == {"a100": pytest.approx(1.0)}


def test_the_command_sees_utc_over_the_callers_zone(in_zone: Callable[[str], None]) -> None:
    """The runner puts SLURM_ENV over this process's TZ: a command that formats with
    localtime(), as Slurm's do, prints UTC."""
    in_zone(BERLIN)
    show = ["sh", "-c", f'printf "%s " "$TZ"; date -d @{FIRST_0230} +%H:%M']
    assert SubprocessRunner().run(show, env=SLURM_ENV).stdout == "UTC 00:30\n"
    assert SubprocessRunner().run(show).stdout == f"{BERLIN} 02:30\n"


@pytest.mark.usefixtures("berlin")
def test_refit_reads_since_in_the_users_zone_and_asks_sacct_in_utc(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        fixtures_dir: Path, tmp_path: Path) -> None:
    asked: list[str] = []

    def accounting(self: CommandBackend, *, since: str = "now-1day", **_: object) -> list[object]:
        asked.append(since)
        return []

    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.setattr(CommandBackend, "accounting", accounting)
    data = str(fixtures_dir / "predict" / "measurements_small.csv")
    code, _, err = run_main(["model", "refit", "--data", data, "--out", str(tmp_path / "m.json"),
                             "--since", "2026-10-25T04:00"], capsys)
    assert asked == ["2026-10-25T03:00:00"]  # 04:00 CET
    assert code != 0 and "no usable finished jobs" in err
