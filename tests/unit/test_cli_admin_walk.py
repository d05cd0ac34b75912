"""`hase` as a new admin meets it: what `schedd run --dry-run` prints while slurmctld is away,
what `schedd status --cycles 0` says, and the simulate example of `hase --help`."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from slurm_hase.cli import schedd_cmd
from slurm_hase.cli.schedd_run import cycle_lines
from slurm_hase.daemon.cycle import CycleConfig, JobEstimate, run_cycle
from slurm_hase.daemon.fake import FakeBackend, gpu_node
from slurm_hase.daemon.loop import WallClock
from slurm_hase.errors import SlurmCommandError, SlurmUnavailableError
from slurm_hase.policy.types import ClusterState, Decision
from slurm_hase.policy.usage import UsageLedger
from slurm_hase.slurm.types import GpuRequest, Job, JobState
from slurm_hase.store.state import CycleRow, StateStore
from tests.conftest import run_main

Capsys = pytest.CaptureFixture[str]
# the description hsbatch wrote for `#HASE model=resnet50 batch_size=64 iterations=20000` on the
# local cluster (scontrol show job: Comment=)
COMMENT = '{"hase":1,"model":"resnet50","bs":64,"iters":20000}'


class GoesAway(FakeBackend):
    """slurmctld answers the first `answers` squeue calls, then is unreachable; at the
    `stop_at`-th squeue call the daemon is sent SIGTERM (as systemctl stop would)."""

    def __init__(self, answers: int, stop_at: int) -> None:
        super().__init__(
            [Job(job_id="7", name="train", user="u", account="teama", partition="gpu",
                 state=JobState.PENDING, gpu=GpuRequest(1, None, "job"), comment=COMMENT,
                 submit_time=1_000, time_limit_s=36_000)],
            [gpu_node("a1", "a100"), gpu_node("t1", "t4")], shares={"teama": 1.0})
        self.answers, self.stop_at, self.squeue_calls = answers, stop_at, 0

    def jobs(self) -> list[Job]:
        self.squeue_calls += 1
        if self.squeue_calls >= self.stop_at:
            os.kill(os.getpid(), signal.SIGTERM)
        if self.squeue_calls > self.answers:
            raise SlurmUnavailableError(["squeue"], 1, "Unable to contact slurm controller")
        return super().jobs()


@pytest.fixture
def keep_signal_handlers() -> Iterator[None]:
    """`hase schedd run` installs SIGTERM/SIGINT/SIGHUP handlers; put pytest's back afterwards."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def _config(tmp_path: Path) -> Path:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[schedd]\nlog_format = "text"\nlog_level = "ERROR"\ninterval_s = 1\n'
                   "backoff_s = 0.1\nbackoff_max_s = 0.1\n")
    return cfg


def test_a_dry_run_does_not_print_the_last_cycle_again_while_slurm_is_away(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Capsys,
        keep_signal_handlers: None) -> None:
    monkeypatch.delenv("SLURM_CONF", raising=False)
    backend = GoesAway(answers=1, stop_at=4)  # one good cycle, then three that fail
    monkeypatch.setattr(schedd_cmd, "_backend", lambda: backend)
    code, out, _ = run_main(["schedd", "run", "--dry-run", "--config", str(_config(tmp_path)),
                             "--state-db", str(tmp_path / "s.db")], capsys)
    assert code == 0
    assert backend.squeue_calls == 4
    # the one cycle that observed Slurm, printed once; before, each failed cycle printed it again
    summaries = [ln for ln in out.splitlines() if ln.startswith("# policy fair:")]
    assert len(summaries) == 1, out
    assert out.count("would run: scontrol update jobid=7 ") == 1, out


def test_status_cycles_0_does_not_say_no_cycle_was_recorded(tmp_path: Path, capsys: Capsys
                                                            ) -> None:
    db = tmp_path / "s.db"
    store = StateStore(db)
    store.record_cycle(CycleRow(5.0, 0.2, "fair", False, "d", 1, 1, 1, 1, 0, 0), [], {})
    store.close()
    code, out, err = run_main(["schedd", "status", "--state-db", str(db), "--cycles", "0"],
                              capsys)
    assert code == 0, err
    assert "no cycles recorded yet" not in out  # one is: --cycles 0 only lists none of them
    code, out, err = run_main(["schedd", "status", "--state-db", str(db)], capsys)
    assert code == 0, err
    assert "cycle      1  fair" in out


def test_the_simulate_example_of_hase_help_runs_where_hase_is_installed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Capsys) -> None:
    """`hase --help`'s typical admin flow: its simulate line runs without the project's data
    directory (an installed package has none) and finishes; it named the Philly trace, which
    an install does not have, and which a checkout replays whole (82,247 jobs, over an hour)."""
    code, out, _ = run_main(["--help"], capsys)
    assert code == 0
    lines = [ln.split("#")[0].split() for ln in out.splitlines()
             if ln.strip().startswith("hase simulate ")]
    assert len(lines) == 1, out
    empty = tmp_path / "data"
    empty.mkdir()
    monkeypatch.setenv("HASE_DATA_DIR", str(empty))  # no sia/, gavel/ or alibaba/ in it
    code, out, err = run_main([*lines[0][1:], "--no-plots", "--out", str(tmp_path / "sim")],
                              capsys)
    assert code == 0, err
    assert "jobs finished" in err and "avg JCT" in out


def _rotation(dry_run: bool) -> tuple[FakeBackend, list[str]]:
    """One cycle over two opted-in running jobs (checkpoint=yes, Requeue=1) whose policy asks
    to requeue both, at most one a cycle, and what `run --once` prints of it."""
    def running(job_id: str) -> Job:
        return Job(job_id=job_id, name="train", user="u", account="teama", partition="gpu",
                   state=JobState.RUNNING, gpu=GpuRequest(1, None, "job"),
                   alloc_gpus={"v100": 1}, start_time=1_000, time_limit_s=100_000,
                   comment='{"hase":1,"model":"resnet50","ckpt":1}', requeue=True)

    class Rotate:
        name, summary = "rotate", "requeues both running jobs"

        def decide(self, state: ClusterState) -> list[Decision]:
            return [Decision("1", nice=5, gpu_types=("a100",), requeue=True),
                    Decision("2", requeue=True)]

    class Runtimes:
        def estimate(self, job: Job, gpu_types: Sequence[str]) -> JobEstimate | None:
            return JobEstimate(dict.fromkeys(gpu_types, 500.0), checkpoint=True)

    backend = FakeBackend([running("1"), running("2")],
                          [gpu_node("v1", "v100", alloc=2), gpu_node("a1", "a100")])
    config = CycleConfig(requeue=True, requeue_max=1, requeue_min_run_s=0.0, dry_run=dry_run)
    res = run_cycle(backend, Rotate(), Runtimes(), WallClock(), UsageLedger(3600.0), {}, config,
                    owned={})
    return backend, cycle_lines(res, "rotate", dry_run)


def test_a_dry_run_prints_the_requeue_it_would_make() -> None:
    backend, lines = _rotation(dry_run=True)
    assert backend.requeued == []  # a dry run
    # before, the requeue of job 1 was left out, and only job 2's refusal was printed
    assert lines[:2] == ["would run: scontrol requeue 1",
                         "# job 2: requeue refused: more than 1 requeues this cycle"]
    assert lines[2].startswith("# policy rotate: 0 updates and 1 requeues for 0 pending jobs")


def test_a_real_cycle_prints_the_requeue_it_ran_before_the_jobs_update() -> None:
    backend, lines = _rotation(dry_run=False)
    assert backend.requeued == ["1"]
    assert lines[:2] == ["ran: scontrol requeue 1",
                         "ran: scontrol update jobid=1 Nice=5 Features=a100"]
    assert lines[-1].startswith("# policy rotate: 1 updates and 1 requeues")


class OldSqueue(FakeBackend):
    """A Slurm whose squeue has no --json (before 21.08; slurm-hase needs 22.05): slurmctld
    answers, the command is refused."""

    def jobs(self) -> list[Job]:
        raise SlurmCommandError(["squeue", "--json"], 1, "squeue: unrecognized option '--json'\n"
                                "Try \"squeue --help\" for more information")


def test_run_once_says_why_no_cycle_completed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: Capsys) -> None:
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.setattr(schedd_cmd, "_backend", lambda: OldSqueue())
    code, out, err = run_main(["schedd", "run", "--once", "--dry-run", "--config",
                               str(_config(tmp_path)), "--state-db", str(tmp_path / "s.db")],
                              capsys)
    assert code == 1 and out == ""
    # before: 'slurm unavailable; no cycle completed', whatever the failure was
    assert err.splitlines()[-2:] == [
        "hase: error: no cycle completed: squeue --json... exited 1: squeue: unrecognized "
        "option '--json'", "Try \"squeue --help\" for more information"]


def test_a_quiet_cycle_of_a_dry_run_does_not_say_nothing_pends(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Capsys,
        keep_signal_handlers: None) -> None:
    monkeypatch.delenv("SLURM_CONF", raising=False)
    backend = GoesAway(answers=2, stop_at=2)  # two cycles on the same queue: the second is quiet
    monkeypatch.setattr(schedd_cmd, "_backend", lambda: backend)
    code, out, _ = run_main(["schedd", "run", "--dry-run", "--config", str(_config(tmp_path)),
                             "--state-db", str(tmp_path / "s.db")], capsys)
    assert code == 0
    summaries = [ln for ln in out.splitlines() if ln.startswith("# policy fair:")]
    # before, the quiet cycle printed '0 updates for 0 pending jobs' with job 7 pending
    assert summaries[0].startswith("# policy fair: 1 updates for 1 pending jobs")
    assert summaries[1] == ("# policy fair: no job or node changed since the last cycle that "
                            "decided; nothing decided (the next decides at the latest refresh_s "
                            "after it)")


@pytest.mark.parametrize("policy", ["fair", "gavel"])
def test_a_zero_share_runs_a_cycle(policy: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: Capsys) -> None:
    """[shares] teama = 0 (Slurm's Fairshare=0 likewise): fair's split of the GPUs divided by the
    shares of the accounts still wanting GPUs, and the daemon ended every cycle in a
    ZeroDivisionError traceback once such an account had a job."""
    monkeypatch.delenv("SLURM_CONF", raising=False)
    backend = GoesAway(answers=1, stop_at=99)  # teama's job 7 pending, Slurm answering
    monkeypatch.setattr(schedd_cmd, "_backend", lambda: backend)
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[schedd]\nlog_level = "ERROR"\n[policy]\nname = "{policy}"\n'
                   "[shares]\nteama = 0\nteamb = 1\n")
    got, out, err = run_main(["schedd", "run", "--once", "--dry-run", "--config", str(cfg),
                              "--state-db", str(tmp_path / "s.db")], capsys)
    assert got == 0, err
    assert "Traceback" not in err and f"# policy {policy}:" in out
