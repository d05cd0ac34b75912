"""A requeued job is one sacct record per run (sacct -D; sacct --json always): every run's GPU
time counts, the job counts once, its wait is the time it spent queued before its runs, and
the text (live) and JSON (--input) views of the same window agree."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from slurm_hase.cli import report_cmd
from slurm_hase.cli.main import cli
from slurm_hase.daemon.history import build_history
from slurm_hase.daemon.seed import add_service
from slurm_hase.policy.usage import UsageLedger
from slurm_hase.reports.fairness import fairness_report
from slurm_hase.reports.queue import with_queue
from slurm_hase.reports.window import stamp
from slurm_hase.slurm import commands
from slurm_hase.slurm.command_backend import CommandBackend
from slurm_hase.slurm.parse_json_sacct import parse_sacct_json
from slurm_hase.slurm.parse_sacct_text import parse_sacct_parsable
from slurm_hase.slurm.runner import CommandResult
from slurm_hase.slurm.types import AccountingRecord, GpuRequest, Job, JobState, Node

LOCAL = "local-22.05"
# the capture (capture-local.sh): job 105, 2 t4 GPUs on t4-1, requeued 11 s after it started at
# once, then held back ~2 minutes (BeginTime) and run again for 25 s to the end
RUN1_S, RUN2_S, WAIT_S = 11, 25, 124
GPU_H = 2 * (RUN1_S + RUN2_S) / 3600


def _text(fixtures_dir: Path) -> str:
    return (fixtures_dir / "slurm" / LOCAL / "sacct-requeued.txt").read_text()


def _json_doc(fixtures_dir: Path) -> str:
    return (fixtures_dir / "slurm" / LOCAL / "sacct-requeued.json").read_text()


def test_sacct_asks_for_every_run_of_a_requeued_job() -> None:
    for argv in (commands.sacct_parsable(since="now-1hour", until="now"),
                 commands.sacct_parsable(job_ids=["5"])):
        assert "-D" in argv and argv[:4] == ["sacct", "-a", "-X", "-P"]


class Runner:
    def __init__(self, answers: dict[tuple[str, ...], str]) -> None:
        self.answers = answers

    def run(self, argv: Sequence[str], **_: Any) -> CommandResult:
        out = self.answers.get(tuple(argv))
        if out is None:
            return CommandResult(tuple(argv), 1, "", f"unexpected {list(argv)}")
        return CommandResult(tuple(argv), 0, out, "")


@pytest.mark.usefixtures("utc")
@pytest.mark.parametrize(("local", "job_id"), [("local-22.05", "105"), ("local-24.11", "911")])
def test_captured_runs_of_a_requeued_job(fixtures_dir: Path, local: str, job_id: str) -> None:
    """`sacct -D` as CommandBackend.accounting asks it (22.05 and 24.11, capture-local.sh): one
    line per run, the same job id, the first REQUEUED, each run's own submit (reset at the
    requeue) and TRES."""
    raw = (fixtures_dir / "slurm" / local / "sacct-requeued.txt").read_text()
    argv = tuple(commands.sacct_parsable(job_ids=[job_id]))
    first, second = CommandBackend(Runner({argv: raw})).accounting(job_ids=[job_id])
    assert first.job_id == second.job_id == job_id
    assert (first.state, second.state) == (JobState.REQUEUED, JobState.COMPLETED)
    assert first.alloc_gpus == second.alloc_gpus == {"t4": 2}
    assert (first.elapsed_s, second.elapsed_s) == (RUN1_S, RUN2_S)
    assert first.end_time == second.submit_time  # the requeue resets the submit time
    assert first.nodes == second.nodes == "t4-1"
    # Eligible: at once for the first run; the requeued run is held back ~2 minutes (BeginTime)
    assert first.eligible_time == first.submit_time
    assert second.submit_time is not None and second.eligible_time is not None
    assert second.eligible_time - second.submit_time == 121
    # the JSON of the same job has the same two runs, field for field (on 24.11 too, whose
    # JSON gives the first run's state as ["PENDING", "REQUEUED"])
    raw_json = (fixtures_dir / "slurm" / local / "sacct-requeued.json").read_text()
    assert parse_sacct_json(raw_json) == [first, second]


@pytest.mark.usefixtures("utc")
@pytest.mark.parametrize("kind", ["text", "json"])
def test_requeued_job_counts_once_with_every_runs_gpu_time(fixtures_dir: Path, kind: str) -> None:
    recs = (parse_sacct_parsable(_text(fixtures_dir), delimiter=commands.SACCT_DELIMITER)
            if kind == "text" else parse_sacct_json(_json_doc(fixtures_dir)))
    rep = fairness_report(recs, speed_weights={"t4": 1.0})
    [teamb] = rep.accounts
    assert teamb.jobs == 1 and teamb.never_started == 0 and teamb.pending_now == 0
    assert teamb.gpu_hours == {"t4": pytest.approx(GPU_H)}
    assert teamb.mean_wait_s == WAIT_S  # 0 s before run 1 + 124 s from the requeue to run 2
    [user] = rep.users
    assert user.jobs == 1 and user.mean_wait_s == WAIT_S


def _window(fixtures_dir: Path) -> tuple[int, int]:
    first, second = parse_sacct_json(_json_doc(fixtures_dir))
    assert first.submit_time is not None and second.end_time is not None
    return first.submit_time - 60, second.end_time + 60


class CapturedBackend:
    """Live mode over the text capture (what sacct -D printed for that window)."""

    def __init__(self, raw: str) -> None:
        self.raw = raw

    def accounting(self, *, since: str, until: str) -> list[AccountingRecord]:
        return parse_sacct_parsable(self.raw, delimiter=commands.SACCT_DELIMITER)

    def account_shares(self) -> dict[str, float]:
        return {"teama": 60.0, "teamb": 40.0}

    def nodes(self) -> list[Node]:
        return [Node("t4-1", "IDLE", gpus={"t4": 4})]

    def jobs(self) -> list[Job]:
        return []


@pytest.mark.usefixtures("utc")
def test_live_and_saved_json_agree_on_the_same_window(fixtures_dir: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    lo, hi = _window(fixtures_dir)
    span = ["--since", stamp(lo), "--until", stamp(hi), "--account", "teamb", "--weights", "none",
            "--shares", "teama=60,teamb=40", "--json"]
    monkeypatch.setattr(report_cmd, "_backend", lambda timeout_s: CapturedBackend(_text(fixtures_dir)))
    live = CliRunner().invoke(cli, ["report", "usage", *span])
    saved = tmp_path / "saved.json"
    saved.write_text(_json_doc(fixtures_dir))
    offline = CliRunner().invoke(cli, ["report", "usage", "--input", str(saved), *span])
    assert live.exit_code == 0 and offline.exit_code == 0, live.output + offline.output
    a, b = json.loads(live.stdout), json.loads(offline.stdout)
    assert a["accounts"] == b["accounts"] and a["users"] == b["users"]
    [teamb] = a["accounts"]
    assert teamb["jobs"] == 1 and teamb["mean_wait_s"] == WAIT_S
    assert teamb["total_gpu_hours"] == pytest.approx(GPU_H, abs=1e-6)


def test_window_clips_each_run(fixtures_dir: Path) -> None:
    """A window from the middle of run 1 to the middle of run 2 counts the part of each run in
    it; a window that holds only run 2 counts one job with run 2's wait."""
    first, second = parse_sacct_json(_json_doc(fixtures_dir))
    assert first.start_time is not None and second.start_time is not None
    span = (first.start_time + 5, second.start_time + 10)
    [row] = fairness_report([first, second], window=span).accounts
    assert row.gpu_hours["t4"] == pytest.approx(2 * (RUN1_S - 5 + 10) / 3600)
    [late] = fairness_report([second]).accounts
    assert late.jobs == 1 and late.mean_wait_s == WAIT_S


def _run(state: JobState, submit: int, start: int | None, end: int | None,
         job_id: str = "7") -> AccountingRecord:
    elapsed = max((end or 0) - start, 0) if start is not None else 0
    return AccountingRecord(job_id, "j", "a", "u", state, submit_time=submit, start_time=start,
                            end_time=end, elapsed_s=elapsed, alloc_gpus={"t4": 1} if elapsed else {},
                            nodes="t4-1" if elapsed else "")


def test_requeued_then_pending_now_is_one_pending_job() -> None:
    """sacct -D of a job requeued and pending again: its REQUEUED run and squeue's pending job
    are one job, pending now, with the GPU time of the run it had."""
    recs = [_run(JobState.REQUEUED, 0, 10, 70), _run(JobState.PENDING, 70, None, None)]
    pend = Job("7", "j", "u", "a", "gpu", JobState.PENDING, submit_time=70,
               gpu=GpuRequest(1, "t4", "job"))
    [row] = fairness_report(with_queue(recs, [pend])).accounts
    assert (row.jobs, row.pending_now, row.never_started) == (1, 1, 0)
    assert row.gpu_hours == {"t4": pytest.approx(60 / 3600)}
    assert row.mean_wait_s is None  # still waiting: no wait to count yet


def test_requeued_then_cancelled_before_restart_did_start() -> None:
    recs = [_run(JobState.REQUEUED, 0, 10, 70), _run(JobState.CANCELLED, 70, None, 100)]
    [row] = fairness_report(recs).accounts
    assert (row.jobs, row.never_started) == (1, 0) and row.mean_wait_s == 10


def test_job_runs_groups_by_job_id_in_run_order() -> None:
    from slurm_hase.reports.fairness import job_runs, job_wait

    a2, a1 = _run(JobState.COMPLETED, 70, 80, 90), _run(JobState.REQUEUED, 0, 10, 70)
    other = _run(JobState.COMPLETED, 5, 5, 6, job_id="8")
    assert job_runs([a2, other, a1]) == [[a1, a2], [other]]
    assert job_wait([a1, a2]) == 10 + 10
    assert job_wait([_run(JobState.CANCELLED, 0, None, 5)]) is None


@pytest.mark.usefixtures("utc")
def test_history_estimates_from_the_completed_run_only(fixtures_dir: Path) -> None:
    """The daemon's runtime history: the run cut short by the requeue is no runtime sample."""
    recs = parse_sacct_parsable(_text(fixtures_dir), delimiter=commands.SACCT_DELIMITER)
    assert build_history(recs) == {("root", "requeued"): {"t4": [float(RUN2_S)]}}


@pytest.mark.usefixtures("utc")
def test_daemon_ledger_seeding_counts_every_run(fixtures_dir: Path) -> None:
    """The daemon's usage ledger is seeded from the same sacct call: both runs add service."""
    recs = parse_sacct_parsable(_text(fixtures_dir), delimiter=commands.SACCT_DELIMITER)
    end = max(r.end_time or 0 for r in recs)
    ledger = UsageLedger(1e12)  # no decay to speak of
    ledger.add_interval("", 0.0, float(end), float(end))
    assert add_service(ledger, recs, until=float(end)) == 2
    assert ledger.usage()["teamb"] == pytest.approx(2 * (RUN1_S + RUN2_S), rel=1e-4)


def test_captured_24_11_runs_of_a_requeued_job(fixtures_dir: Path) -> None:
    """Real 24.11 `sacct --json -D` (local-24.11/sacct-requeued.json): the first run's state is
    ["PENDING", "REQUEUED"]; it was read as PENDING, and the saved report counted the finished
    job as pending now."""
    raw = (fixtures_dir / "slurm" / "local-24.11" / "sacct-requeued.json").read_text()
    first, second = parse_sacct_json(raw)
    assert first.job_id == second.job_id == "911"
    assert (first.state, second.state) == (JobState.REQUEUED, JobState.COMPLETED)
    assert first.alloc_gpus == second.alloc_gpus == {"t4": 2}
    assert first.end_time == second.submit_time  # the requeue resets the submit time
    [row] = fairness_report([first, second]).accounts
    assert (row.jobs, row.pending_now, row.never_started) == (1, 0, 0)
    assert row.mean_wait_s == (first.start_time - first.submit_time
                               + second.start_time - second.submit_time)


@pytest.mark.parametrize("flags", [["PENDING", "REQUEUED"], ["REQUEUED", "PENDING"],
                                   ["PENDING", "REQUEUE_HOLD"]])
def test_a_24_11_record_with_the_requeue_flag_is_requeued(fixtures_dir: Path,
                                                          flags: list[str]) -> None:
    """24.11's JSON gives the base state and the flags (slurm.schedmd.com/job_state_codes:
    "the REST API returns both", sacct prints one); the earlier run of a requeued job came back
    as ["PENDING", "REQUEUED"] and was read as PENDING: the live test on 24.11 found the saved
    report counting the finished job as pending now. A real 24.11 record, with that state."""
    doc = json.loads((fixtures_dir / "slurm" / "24.11" / "sacct.json").read_text())
    doc["jobs"] = [doc["jobs"][0]]
    doc["jobs"][0]["state"]["current"] = flags
    [rec] = parse_sacct_json(json.dumps(doc))
    assert rec.state is JobState.REQUEUED
    doc["jobs"][0]["state"]["current"] = ["COMPLETED"]
    assert parse_sacct_json(json.dumps(doc))[0].state is JobState.COMPLETED
