"""`hase report usage`: jobs pending now (squeue) apart from jobs that ended without starting."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from slurm_hase.cli import report_cmd
from slurm_hase.cli.main import cli
from slurm_hase.errors import SlurmCommandError
from slurm_hase.reports.fairness import fairness_report, started
from slurm_hase.reports.queue import pending_record, with_queue
from slurm_hase.slurm.command_backend import live_jobs
from slurm_hase.slurm.parse_json import parse_squeue_json
from slurm_hase.slurm.parse_sacct_text import parse_sacct_parsable
from slurm_hase.slurm.types import AccountingRecord, Job, JobState

# Verbatim `sacct -a -X -P -j 4,7,8,15,17,20,23,115,268 -o <SACCT_FIELDS>` of the local Slurm
# 22.05.8 test cluster (2026-12-01). 7 ran; 8 ran and was cancelled; the others were cancelled
# while pending: Slurm gives 17 and 20 (held for --begin) Start = End, the rest Start None, and
# 268 (requeued, then cancelled) keeps AllocTRES billing=1.
LOCAL_SACCT = """\
JobID|JobName|Account|User|State|ExitCode|Submit|Eligible|Start|End|ElapsedRaw|ReqTRES|AllocTRES|Constraints|NodeList|Partition|Comment
4|it-hold|teama|root|CANCELLED|0:0|2026-12-01T22:06:24|2026-12-01T23:06:24|None|2026-12-01T22:06:25|0|billing=1,cpu=1,gres/gpu=1,mem=8000M,node=1|||None assigned|gpu|
7|it-short|teamb|root|COMPLETED|0:0|2026-12-01T22:06:25|2026-12-01T22:06:25|2026-12-01T22:06:26|2026-12-01T22:06:27|1|billing=1,cpu=1,gres/gpu:a100=1,gres/gpu=1,mem=8000M,node=1|billing=1,cpu=1,gres/gpu:a100=1,gres/gpu=1,node=1||a100-1|gpu|
8|hase-0|teama|root|CANCELLED|0:15|2026-12-01T22:06:27|2026-12-01T22:06:28|2026-12-01T22:06:29|2026-12-01T22:06:30|1|billing=1,cpu=1,gres/gpu=1,mem=8000M,node=1|billing=1,cpu=1,gres/gpu:a100=1,gres/gpu=1,node=1|a100|a100-1|gpu|
15|hase-q1|teama|root|CANCELLED|0:0|2026-12-01T22:06:30|2026-12-01T23:06:30|None|2026-12-01T22:06:32|0|billing=1,cpu=1,gres/gpu=1,mem=8000M,node=1||a100|None assigned|gpu|
17|hase-a0|teama|root|CANCELLED|0:0|2026-12-01T22:06:32|2026-12-01T23:06:32|2026-12-01T22:06:32|2026-12-01T22:06:32|0|billing=1,cpu=1,gres/gpu=1,mem=8000M,node=1|||None assigned|gpu|
20|hase-b0|teamb|root|CANCELLED|0:0|2026-12-01T22:06:32|2026-12-01T23:06:32|2026-12-01T22:06:32|2026-12-01T22:06:32|0|billing=1,cpu=1,gres/gpu=1,mem=8000M,node=1|||None assigned|gpu|
23|hase-r|teama|root|CANCELLED|0:0|2026-12-01T22:06:32|2026-12-01T23:06:32|None|2026-12-01T22:06:56|0|billing=1,cpu=1,gres/gpu=1,mem=8000M,node=1|||None assigned|gpu|
115|rot-a0|teama|root|CANCELLED|0:0|2026-12-01T22:07:50|2026-12-01T22:09:51|None|2026-12-01T22:07:52|0|billing=1,cpu=1,gres/gpu=1,mem=8000M,node=1||a100|None assigned|gpu|{"hase":1,"model":"resnet50","ckpt":1}
268|rot-a0|teama|root|CANCELLED|0:0|2026-12-01T23:22:30|2026-12-01T23:24:31|None|2026-12-01T23:22:31|0|billing=1,cpu=1,gres/gpu=1,mem=8000M,node=1|billing=1|a100|None assigned|gpu|{"hase":1,"model":"resnet50","ckpt":1}
"""


def test_cancelled_before_start_is_never_started_not_pending() -> None:
    records = parse_sacct_parsable(LOCAL_SACCT)
    assert [r.job_id for r in records if started(r)] == ["7", "8"]
    rep = fairness_report(records)
    teama, teamb = rep.accounts
    assert (teama.jobs, teama.pending_now, teama.never_started) == (7, 0, 6)
    assert (teamb.jobs, teamb.pending_now, teamb.never_started) == (2, 0, 1)
    assert teama.mean_wait_s == 2.0  # job 8 only: cancelled-while-pending jobs did not wait to start
    assert teamb.mean_wait_s == 1.0
    assert rep.accounts[0].as_dict()["never_started"] == 6
    assert "pending" not in rep.accounts[0].as_dict()


def _captured(fixtures_dir: Path, version: str) -> tuple[list[AccountingRecord], list[Job]]:
    base = fixtures_dir / "slurm" / version
    records = parse_sacct_parsable((base / "sacct-parsable.txt").read_text())
    return records, live_jobs(parse_squeue_json((base / "squeue.json").read_text()))


def test_pending_now_comes_from_squeue(fixtures_dir: Path) -> None:
    # 22.05: sacct lists none of the 4 jobs squeue shows PENDING; 24.11: sacct lacks the held one
    records, jobs = _captured(fixtures_dir, "22.05")
    assert not [r for r in records if r.state is JobState.PENDING]
    merged = with_queue(records, jobs)
    assert sorted(r.job_id for r in merged if r.state is JobState.PENDING) == ["151", "152", "153_[1-3]", "154"]
    records, jobs = _captured(fixtures_dir, "24.11")
    assert sorted(r.job_id for r in records if r.state is JobState.PENDING) == ["11_[1-3]", "12", "8", "9"]
    by = {r.account: r for r in fairness_report(with_queue(records, jobs)).accounts}
    # + held (10); the array's 3 pending tasks (11_[1-3]) are 3 jobs, as each is once it runs
    assert (by["teama"].jobs, by["teama"].pending_now) == (9, 4)
    assert (by["teamb"].jobs, by["teamb"].pending_now) == (5, 3)
    held = pending_record(next(j for j in jobs if j.name == "held"))
    assert (held.job_id, held.account, held.start_time, held.alloc_gpus) == ("10", "teama", None, {})
    assert with_queue(records, jobs, until=1795992093) == [r for r in records if r.state is not JobState.PENDING]


class CapturedBackend:
    """Live-mode seam over the 22.05 captures: sacct -P, squeue --json (failing on request)."""

    def __init__(self, fixtures_dir: Path, squeue_fails: bool = False) -> None:
        self.records, self.queue = _captured(fixtures_dir, "22.05")
        self.squeue_fails = squeue_fails

    def accounting(self, *, since: str, until: str) -> list[AccountingRecord]:
        return self.records

    def account_shares(self) -> dict[str, float]:
        return {"teama": 60.0, "teamb": 40.0}

    def nodes(self) -> list[Any]:
        return []

    def jobs(self) -> list[Job]:
        if self.squeue_fails:
            raise SlurmCommandError(["squeue", "--json"], 1, "slurm_load_jobs error: Unable to contact slurm controller")
        return self.queue


def test_usage_counts_pending_from_squeue(monkeypatch: pytest.MonkeyPatch, fixtures_dir: Path) -> None:
    monkeypatch.setattr(report_cmd, "_backend", lambda timeout_s: CapturedBackend(fixtures_dir))
    res = CliRunner().invoke(cli, ["report", "usage", "--since", "2026-11-29", "--until", "now", "--json"])
    assert res.exit_code == 0, res.output
    rows = {a["account"]: a for a in json.loads(res.stdout)["accounts"]}
    assert {a: (r["jobs"], r["pending_now"], r["never_started"]) for a, r in rows.items()} == {
        "teama": (7, 4, 0), "teamb": (3, 2, 0)}  # held + array of 3; pend-a100b + untyped
    res = CliRunner().invoke(cli, ["report", "usage", "--since", "2026-11-29", "--until", "now"])
    assert res.stdout.splitlines()[2].split()[:4] == ["teama", "7", "4", "0"]


def test_squeue_failure_warns_and_keeps_sacct(monkeypatch: pytest.MonkeyPatch, fixtures_dir: Path) -> None:
    monkeypatch.setattr(report_cmd, "_backend", lambda timeout_s: CapturedBackend(fixtures_dir, squeue_fails=True))
    res = CliRunner().invoke(cli, ["report", "usage", "--since", "2026-11-29", "--json"])
    assert res.exit_code == 0, res.output
    assert res.stderr.startswith("hase: warning: squeue failed (squeue --json... exited 1:")
    assert "pending jobs counted from sacct" in res.stderr
    assert [a["pending_now"] for a in json.loads(res.stdout)["accounts"]] == [0, 0]


def test_a_pending_array_counts_its_tasks() -> None:
    # squeue, sacct -P and (24.11) sacct --json give the tasks of an array still pending as one
    # record (11_[1-3] in the captures), which counted 1 job, 1 pending; each task is a job
    from slurm_hase.reports.queue import array_tasks

    assert [array_tasks(i) for i in ("11_[1-3]", "11_[1,4-9:2%2]", "11_[0]", "11_2", "11",
                                     "11+0", "11_[x]", "11_[3-1]")] == [3, 4, 1, 1, 1, 1, 1, 1]
    pending = AccountingRecord(job_id="11_[1-3]", name="arr", account="a", user="u",
                               state=JobState.PENDING, submit_time=0)
    [row] = fairness_report([pending]).accounts
    assert (row.jobs, row.pending_now) == (3, 3)
    # cancelled before any task ran: sacct keeps the one record, now CANCELLED; 3 unstarted jobs
    cancelled = replace(pending, state=JobState.CANCELLED, end_time=5)
    [row] = fairness_report([cancelled]).accounts
    assert (row.jobs, row.pending_now, row.never_started) == (3, 0, 3)


def test_saved_json_names_a_pending_array_as_sacct_does(fixtures_dir: Path) -> None:
    # 24.11's JSON gives the pending tasks as a bitmap (array.task "0xE": tasks 1-3) and job_id
    # 11 with no task id; it read as one job "11" where sacct -P prints 11_[1-3]
    from slurm_hase.slurm.parse_json_sacct import parse_sacct_json

    base = fixtures_dir / "slurm" / "24.11"
    ids = [r.job_id for r in parse_sacct_json((base / "sacct.json").read_text())]
    text = [r.job_id for r in parse_sacct_parsable((base / "sacct-parsable.txt").read_text())]
    assert "11_[1-3]" in ids and sorted(ids) == sorted(text)


def test_pending_records_say_what_they_ask_for(fixtures_dir: Path) -> None:
    """squeue's pending jobs carry a ReqTRES: sacct's where sacct has the job, else the GPUs
    squeue shows; a pending CPU-only job is then left out of the GPU report."""
    records, jobs = _captured(fixtures_dir, "24.11")
    merged = with_queue(records, jobs)
    pending = {r.job_id: r for r in merged if r.state is JobState.PENDING}
    assert pending and all(r.req_tres for r in pending.values())
    assert pending["10"].req_tres == {"gres/gpu": "1"}  # held: not in sacct, squeue's ask
    assert fairness_report(merged).cpu_only_jobs == 0
    # the same queue with job 12 asking for CPUs only, as sacct and squeue would show it
    cpu_rec = [replace(r, req_tres={"billing": "1", "cpu": "1", "node": "1"})
               if r.job_id == "12" else r for r in records]
    cpu_jobs = [replace(j, gpu=None, tres_per_job="", tres_per_node="")
                if j.job_id == "12" else j for j in jobs]
    rep = fairness_report(with_queue(cpu_rec, cpu_jobs))
    assert rep.cpu_only_jobs == 1
    before = {r.account: r.pending_now for r in fairness_report(merged).accounts}
    after = {r.account: r.pending_now for r in rep.accounts}
    assert sum(after.values()) == sum(before.values()) - 1
