"""Slurm's text times through the adapter with hase in a zone other than UTC (New York): the
adapter runs Slurm with TZ=UTC and reads its stamps as UTC, so the text paths (sacct -P,
scontrol show job -o) give the same epochs as sacct --json, whose epochs know no zone."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from slurm_hase.reports.window import stamp
from slurm_hase.slurm import commands
from slurm_hase.slurm.command_backend import SLURM_ENV, CommandBackend
from slurm_hase.slurm.parse_json_sacct import parse_sacct_json
from slurm_hase.slurm.runner import SubprocessRunner
from slurm_hase.slurm.types import AccountingRecord, JobState
from tests.integration.test_adapter_live import QUIET, wait_for

pytestmark = pytest.mark.slurm
ZONE = "America/New_York"


def _times(rec: AccountingRecord) -> tuple[int | None, ...]:
    return (rec.submit_time, rec.eligible_time, rec.start_time, rec.end_time)


def test_text_times_equal_json_epochs_with_hase_in_new_york(
        slurm_backend: CommandBackend, slurm_runner: SubprocessRunner, jobs: list[str],
        in_zone: Callable[[str], None]) -> None:
    in_zone(ZONE)
    assert time.localtime().tm_gmtoff in (-5 * 3600, -4 * 3600)  # the zone did change
    job_id = slurm_backend.submit([*QUIET, "-A", "teama", "-J", "it-utc", "--wrap", "sleep 1"])
    jobs.append(job_id)

    def whole() -> AccountingRecord | None:  # slurmdbd fills a record in steps
        raw = slurm_runner.run(["sacct", "--json", "-a", "-j", job_id]).check().stdout
        if "Nothing found" in raw:  # 22.05: not in the database yet, said inside the JSON
            return None
        recs = parse_sacct_json(raw)
        done = [r for r in recs if r.state is JobState.COMPLETED and None not in _times(r)]
        return done[0] if done else None

    by_json = wait_for("sacct --json COMPLETED", whole, 90)
    [by_text] = slurm_backend.accounting(job_ids=[job_id])
    assert _times(by_text) == _times(by_json)
    shown = slurm_backend.job(job_id)  # scontrol show job -o, while slurmctld keeps it
    assert (shown.submit_time, shown.start_time, shown.end_time) == (
        by_json.submit_time, by_json.start_time, by_json.end_time)
    # the stamps themselves: UTC under the adapter's env, New York time under New York's
    argv = commands.sacct_parsable(job_ids=[job_id], fields=("JobID", "Submit"))
    submit = by_json.submit_time or 0
    utc = slurm_runner.run(argv, env=SLURM_ENV).check().stdout.splitlines()[1]
    local = slurm_runner.run(argv, env={**SLURM_ENV, "TZ": ZONE}).check().stdout.splitlines()[1]
    sep = commands.SACCT_DELIMITER
    assert utc == f"{job_id}{sep}{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(submit))}"
    assert local == f"{job_id}{sep}{time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(submit))}"
    # a window of UTC bounds (as the reports ask for one) lists it; one ending before it not
    start, end = by_json.start_time or 0, by_json.end_time or 0
    listed = slurm_backend.accounting(since=stamp(start - 60), until=stamp(end + 60))
    assert job_id in {r.job_id for r in listed}
    earlier = slurm_backend.accounting(since=stamp(start - 7200), until=stamp(submit - 60))
    assert job_id not in {r.job_id for r in earlier}
