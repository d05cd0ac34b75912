"""`hase report` against the real local cluster: sacct for usage (every run of a requeued job),
squeue for jobs pending now, sacctmgr for the accounts Slurm knows."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pytest

from slurm_hase.errors import HaseError
from slurm_hase.reports.fairness import fairness_report
from slurm_hase.reports.saved import read_saved_sacct
from slurm_hase.reports.window import stamp
from slurm_hase.slurm.command_backend import CommandBackend
from slurm_hase.slurm.runner import SubprocessRunner
from slurm_hase.slurm.types import AccountingRecord, JobState
from tests.integration.test_adapter_live import QUIET, wait_for

pytestmark = pytest.mark.slurm


def test_usage_counts_held_job_as_pending_now(slurm_backend: CommandBackend,
                                              slurm_env: dict[str, str]) -> None:
    """A held job is in squeue but not in sacct's default output: the report still counts it."""
    job_id = slurm_backend.submit(["-o", "/dev/null", "-e", "/dev/null", "-A", "teamb", "--hold",
                                   "--gpus=1", "--wrap", "sleep 1"], None)
    try:
        env = {**os.environ, **slurm_env}
        hase = str(Path(sys.executable).with_name("hase"))  # the venv's console script
        res = subprocess.run([hase, "report", "usage", "--since", "now-1hours", "--json"],
                             env=env, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        accounts = {a["account"]: a for a in json.loads(res.stdout)["accounts"]}
        assert accounts["teamb"]["pending_now"] >= 1
    finally:
        with contextlib.suppress(HaseError):
            slurm_backend.cancel(job_id)


# --- requeued jobs, known accounts, the --account filter, MPS types from the whole file -------

def _hase(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    hase = str(Path(sys.executable).with_name("hase"))  # the venv's console script
    return subprocess.run([hase, *args], env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=120)


def _finished(backend: CommandBackend, job_id: str, runs: int = 1) -> list[AccountingRecord] | None:
    """The job's sacct records once it has `runs` of them and the last one COMPLETED, whole:
    every run with its end and eligible times. slurmdbd can show a finished job with Eligible
    Unknown for a second or two, and until then `sacct -S/-E` leaves it out of every window."""
    recs = backend.accounting(job_ids=[job_id])
    if len(recs) == runs and recs[-1].state is JobState.COMPLETED \
            and all(r.end_time and r.eligible_time for r in recs):
        return recs
    return None


def _saved_sacct(runner: SubprocessRunner, lo: int, hi: int, path: Path) -> Path:
    """`sacct --json -a -D` of the window, saved as a user would for --input."""
    res = runner.run(["sacct", "--json", "-a", "-D", "-S", stamp(lo), "-E", stamp(hi)]).check()
    path.write_text(res.stdout)
    return path


def test_requeued_job_counts_every_run_once_live_and_saved(
        slurm_backend: CommandBackend, slurm_runner: SubprocessRunner, slurm_env: dict[str, str],
        jobs: list[str], tmp_path: Path) -> None:
    """A job requeued while it ran: sacct (as the report asks it) gives both runs, the report
    counts the GPU time of both, the job once, its wait as the sum of its runs' waits; the saved
    `sacct --json` of the same window gives the same."""
    job_id = slurm_backend.submit([*QUIET, "-p", "debug", "-A", "teamb", "-J", "it-requeued",
                                   "--gres=gpu:2", "--requeue", "--wrap", "sleep 20"], None)
    jobs.append(job_id)
    wait_for("the job to run", lambda: next((True for j in slurm_backend.jobs()
                                          if j.job_id == job_id and j.state is JobState.RUNNING),
                                         None), 120)
    time.sleep(5)
    slurm_backend.requeue(job_id)
    # Slurm holds a requeued job back about two minutes (BeginTime) before it runs again
    first, second = wait_for("both runs in sacct", lambda: _finished(slurm_backend, job_id, 2), 300)
    assert (first.state, second.state) == (JobState.REQUEUED, JobState.COMPLETED)
    assert first.alloc_gpus == second.alloc_gpus == {"t4": 2}
    assert first.submit_time and second.end_time and first.elapsed_s > 0
    lo, hi = first.submit_time - 5, second.end_time + 5
    live = [r for r in slurm_backend.accounting(since=stamp(lo), until=stamp(hi))
            if r.job_id == job_id]
    saved = _saved_sacct(slurm_runner, lo, hi, tmp_path / "saved.json")
    offline = [r for r in read_saved_sacct(saved) if r.job_id == job_id]
    assert len(live) == len(offline) == 2
    rows = [fairness_report(recs, window=(lo, hi)).accounts for recs in (live, offline)]
    assert rows[0] == rows[1]
    [teamb] = rows[0]
    assert teamb.jobs == 1
    assert teamb.gpu_hours == {"t4": pytest.approx(2 * (first.elapsed_s + second.elapsed_s) / 3600)}
    waits = sum((r.start_time or 0) - (r.submit_time or 0) for r in (first, second))
    assert teamb.mean_wait_s == waits and waits >= 100  # the second run waited out BeginTime
    # the CLI, live and from the saved file, over the same window: the same GPU time (other
    # teamb jobs of the window included; pending ones are counted as of now live, as saved
    # in the file, so job counts may differ while other tests run)
    span = ["--since", stamp(lo), "--until", stamp(hi), "--account", "teamb", "--weights", "none",
            "--json"]
    got = [_hase(slurm_env, "report", "usage", *span),
           _hase(slurm_env, "report", "usage", "--input", str(saved), *span)]
    assert all(g.returncode == 0 for g in got), [g.stderr for g in got]
    hours = [json.loads(g.stdout)["accounts"][0]["total_gpu_hours"] for g in got]
    assert hours[0] == pytest.approx(hours[1], abs=1e-6)
    assert hours[0] >= round(teamb.total_gpu_hours, 6) - 1e-6


def test_root_account_is_known(slurm_env: dict[str, str]) -> None:
    """sacctmgr lists root (a share of its own user since session 42): no "not an account Slurm
    knows" for it."""
    root = _hase(slurm_env, "report", "usage", "--since", "now-1hours", "--account", "root")
    assert root.returncode == 0, root.stderr
    assert "not an account Slurm knows" not in root.stderr
    typo = _hase(slurm_env, "report", "usage", "--since", "now-1hours", "--account",
                 "no-such-account-hase")
    assert "--account no-such-account-hase is not an account Slurm knows" in typo.stderr


def test_account_filter_keeps_entitlement_in_the_whole_tree(
        slurm_backend: CommandBackend, slurm_env: dict[str, str], jobs: list[str]) -> None:
    """--account teamb keeps teamb's entitlement among every account's shares (teama 60,
    teamb 40), not 100% of the shares cut down to teamb's."""
    job_id = slurm_backend.submit([*QUIET, "-p", "debug", "-A", "teamb", "-J", "it-entitled",
                                   "--gpus=1", "--wrap", "sleep 1"], None)
    jobs.append(job_id)
    wait_for("the job in sacct", lambda: _finished(slurm_backend, job_id), 120)
    res = _hase(slurm_env, "report", "fairness", "--since", "now-1hours", "--account", "teamb",
                "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    [teamb] = data["accounts"]
    shares = slurm_backend.account_shares()
    assert teamb["entitlement"] == pytest.approx(shares["teamb"] / sum(shares.values()))
    assert teamb["entitlement"] < 1.0 and data["only_accounts"] == ["teamb"]


def test_saved_mps_job_type_does_not_depend_on_the_account_filter(
        slurm_backend: CommandBackend, slurm_runner: SubprocessRunner, slurm_env: dict[str, str],
        jobs: list[str], tmp_path: Path) -> None:
    """teama's typed A100 job and teamb's MPS share on the same node: the saved file says the
    node is an A100 one, whichever account the report keeps."""
    typed = slurm_backend.submit([*QUIET, "-A", "teama", "-w", "a100-2", "--gpus=a100:1",
                                  "--wrap", "sleep 2"], None)
    mps = slurm_backend.submit([*QUIET, "-A", "teamb", "-w", "a100-2", "--gres=mps:50",
                                "--wrap", "sleep 2"], None)
    jobs.extend([typed, mps])
    done = [wait_for(f"job {j} in sacct", partial(_finished, slurm_backend, j), 120)[-1]
            for j in (typed, mps)]
    lo = min(r.submit_time or 0 for r in done) - 5
    hi = max(r.end_time or 0 for r in done) + 5
    saved = _saved_sacct(slurm_runner, lo, hi, tmp_path / "saved.json")
    res = _hase(slurm_env, "report", "usage", "--input", str(saved), "--account", "teamb",
                "--weights", "none", "--json")
    assert res.returncode == 0, res.stderr
    [teamb] = json.loads(res.stdout)["accounts"]
    seen = [(r.job_id, r.account, r.nodes, r.alloc_tres, r.state.name, r.elapsed_s)
            for r in read_saved_sacct(saved)]
    assert "mps" not in teamb["gpu_hours"] and teamb["gpu_hours"].get("a100", 0) > 0, seen


@pytest.mark.parametrize("time_format", ["relative", "%s"])
def test_report_reads_sacct_whatever_the_callers_time_format_and_job_names(
        slurm_backend: CommandBackend, slurm_env: dict[str, str], jobs: list[str],
        time_format: str) -> None:
    """sacct and scontrol print times in the caller's SLURM_TIME_FORMAT; a job name may hold
    characters that str.splitlines breaks at (\\x1c, \\x1e). The report reads both."""
    name = "odd\x1cname\x1ehere"
    job_id = slurm_backend.submit([*QUIET, "-A", "teama", "-J", name, "--gpus=1",
                                   "--wrap", "sleep 1"], None)
    jobs.append(job_id)
    [rec] = wait_for("the job in sacct", lambda: _finished(slurm_backend, job_id), 120)
    assert rec.name == name
    res = _hase({**slurm_env, "SLURM_TIME_FORMAT": time_format}, "report", "usage",
                "--since", "now-1hours", "--account", "teama", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["accounts"][0]["jobs"] >= 1
    shown = CommandBackend(SubprocessRunner({**slurm_env, "SLURM_TIME_FORMAT": time_format}))
    assert shown.job(job_id).submit_time == rec.submit_time  # scontrol show job, too


def test_a_cpu_only_job_is_left_out_live_and_saved(
        slurm_backend: CommandBackend, slurm_runner: SubprocessRunner, jobs: list[str],
        tmp_path: Path) -> None:
    """A job that asks for no GPU: sacct's ReqTRES and AllocTRES name none (text and JSON), so
    the GPU report leaves it out (cpu_only_jobs) instead of counting its account at 0."""
    cpu = slurm_backend.submit([*QUIET, "-A", "teamb", "-J", "it-cpu-only", "--wrap", "sleep 1"],
                               None)
    jobs.append(cpu)
    gpu = slurm_backend.submit([*QUIET, "-A", "teama", "-J", "it-gpu", "--gpus=1",
                                "--wrap", "sleep 1"], None)
    jobs.append(gpu)
    [c] = wait_for("the CPU job in sacct", lambda: _finished(slurm_backend, cpu), 120)
    [g] = wait_for("the GPU job in sacct", lambda: _finished(slurm_backend, gpu), 120)
    assert c.req_tres and not c.alloc_gpus, c
    lo, hi = min(c.submit_time or 0, g.submit_time or 0) - 5, max(c.end_time or 0, g.end_time or 0) + 5
    saved = _saved_sacct(slurm_runner, lo, hi, tmp_path / "saved.json")
    offline = [r for r in read_saved_sacct(saved) if r.job_id in (cpu, gpu)]
    for recs in ([c, g], offline):
        rep = fairness_report(recs, shares={"teama": 1.0, "teamb": 1.0})
        assert [a.account for a in rep.accounts] == ["teama"], recs
        assert rep.cpu_only_jobs == 1
