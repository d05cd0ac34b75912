"""Rotation through the daemon loop and its state store: what the daemon set on a job while it
waited is still its own when the job runs and is requeued (by rotation, or by Slurm)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from slurm_hase.daemon.cycle import CycleConfig
from slurm_hase.daemon.fake import FakeBackend, gpu_node
from slurm_hase.daemon.loop import Daemon, LoopSettings
from slurm_hase.policy.types import ClusterState, Decision
from slurm_hase.slurm.types import Job, JobState, JobUpdate
from slurm_hase.store.state import StateStore
from tests.unit.test_daemon_cycle import Scripted
from tests.unit.test_daemon_requeue import Est, running

CONFIG = CycleConfig(requeue=True, refresh_s=0, nice_zero=100_000)


class Clock:
    """A clock the test moves."""

    def __init__(self, t: float) -> None:
        self.t = t

    def now(self) -> float:
        return self.t


def _pending(job: Job) -> Job:
    return replace(job, state=JobState.PENDING, alloc_gpus={}, start_time=None)


def _daemon(fb: FakeBackend, store: StateStore, policy: Scripted, clock: Clock) -> Daemon:
    return Daemon(fb, policy, Est(), clock, store, CONFIG, LoopSettings(), shares={"a": 1.0})


def test_a_job_ordered_then_started_gets_the_rotations_nice_and_type_when_requeued(
        tmp_path: Path) -> None:
    """The daemon forgot its Nice/Features as soon as a job started; when rotation then
    requeued the job, its old front-of-queue Nice and the type it had just given up read as
    the user's ("nice -99990 set by the user; left alone"), so Slurm could restart it at once
    on the GPUs it gave up, and no later cycle ever ordered it again. The store must remember
    them across a daemon restart too."""
    fb = FakeBackend([_pending(running("1")), running("2")],
                     [gpu_node("v1", "v100", alloc=1), gpu_node("a1", "a100")])
    store = StateStore(tmp_path / "s.db")
    policy, clock = Scripted(), Clock(10_000.0)
    daemon = _daemon(fb, store, policy, clock)
    policy.decisions = [Decision("1", nice=10, gpu_types=("v100",))]
    daemon.step()
    assert fb.job_list[0].nice == -99_990 and fb.job_list[0].features == "v100"

    fb.job_list[0] = replace(fb.job_list[0], state=JobState.RUNNING, alloc_gpus={"v100": 1},
                             start_time=10_000)
    clock.t, policy.decisions = 20_000.0, []
    daemon.step()
    restarted = _daemon(fb, store, policy, clock)  # a restart while the job runs

    clock.t = 30_000.0
    policy.decisions = [Decision("1", requeue=True, nice=90_000, gpu_types=("a100",))]
    restarted.step()
    result = restarted.last_result
    assert result is not None and result.requeued == ["1"]
    assert result.applied == [("1", JobUpdate(nice=-10_000, features="a100"))]
    assert not [why for jid, why in result.skipped if jid == "1"]
    job = fb.job_list[0]
    assert (job.state, job.nice, job.features) == (JobState.PENDING, -10_000, "a100")
    assert store.owned()["1"] == (-10_000, "a100")


def test_a_job_slurm_requeued_itself_is_ordered_again(tmp_path: Path) -> None:
    """A job Slurm requeues (a node failure) comes back with the daemon's Nice: the next
    cycle that orders it must not take that Nice for the user's."""
    fb = FakeBackend([_pending(running("1"))], [gpu_node("v1", "v100")])
    store = StateStore(tmp_path / "s.db")
    policy, clock = Scripted(), Clock(10_000.0)
    daemon = _daemon(fb, store, policy, clock)
    policy.decisions = [Decision("1", nice=10)]
    daemon.step()
    fb.job_list[0] = replace(fb.job_list[0], state=JobState.RUNNING, alloc_gpus={"v100": 1},
                             start_time=10_000)
    clock.t, policy.decisions = 20_000.0, []
    daemon.step()
    fb.requeue("1")  # Slurm's own requeue, not the daemon's
    clock.t, policy.decisions = 30_000.0, [Decision("1", nice=500)]
    daemon.step()
    assert fb.job_list[0].nice == -99_500
    assert daemon.last_result is not None and daemon.last_result.skipped == []
    # once the job has left squeue its record goes
    fb.job_list.clear()
    clock.t, policy.decisions = 40_000.0, []
    daemon.step()
    assert store.owned() == {}


class Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs in the process."""


def test_killed_right_after_a_requeue_then_restarted_still_owns_what_it_set(
        tmp_path: Path) -> None:
    """The Nice/Features set on a job right after its requeue were written to the store only
    with the cycle row: a daemon killed before that (here while it updated the next requeued
    job) came back taking its own values for the user's, and never ordered the job again.
    Like any other update, they are in the store before the scontrol call."""
    path = tmp_path / "s.db"
    fb = FakeBackend([running("1"), running("2")], [gpu_node("v1", "v100"),
                                                     gpu_node("a1", "a100")])
    policy, clock = Scripted(), Clock(30_000.0)
    policy.decisions = [Decision(j, requeue=True, nice=90_000, gpu_types=("a100",))
                        for j in ("1", "2")]

    def die_updating_job_2(job_id: str) -> None:
        if job_id == "2":
            raise Killed

    fb.before_update = die_updating_job_2
    store = StateStore(path)
    with pytest.raises(Killed):
        _daemon(fb, store, policy, clock).step()
    store.close()
    assert fb.requeued == ["1", "2"]
    assert (fb.job_list[0].nice, fb.job_list[0].features) == (-10_000, "a100")

    fb.before_update = None
    policy.decisions, clock.t = [Decision("1", nice=500, gpu_types=("a100",))], 40_000.0
    restarted = _daemon(fb, StateStore(path), policy, clock)
    restarted.step()
    assert fb.job_list[0].nice == -99_500, restarted.last_result


def test_reset_keeps_a_running_jobs_record_and_a_later_reset_undoes_it_after_a_requeue(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`hase schedd reset` called a running job that carries the daemon's Nice 'gone (no
    longer pending)' and forgot it: once the job was requeued it came back at the front of
    the queue with that Nice, which nothing could take off any more."""
    from click.testing import CliRunner

    from slurm_hase.cli import schedd_cmd
    from slurm_hase.cli.main import cli

    monkeypatch.delenv("SLURM_CONF", raising=False)
    fb = FakeBackend([_pending(running("1"))], [gpu_node("v1", "v100")])
    db = tmp_path / "s.db"
    store = StateStore(db)
    policy, clock = Scripted(), Clock(10_000.0)
    policy.decisions = [Decision("1", nice=10)]
    _daemon(fb, store, policy, clock).step()
    store.close()
    fb.job_list[0] = replace(fb.job_list[0], state=JobState.RUNNING, alloc_gpus={"v100": 1},
                             start_time=10_000)
    monkeypatch.setattr(schedd_cmd, "_backend", lambda: fb)

    first = CliRunner().invoke(cli, ["schedd", "reset", "--state-db", str(db)])
    assert first.exit_code == 0, first.output
    assert first.output.startswith("1: kept (running, not pending") and "gone" not in first.output
    assert StateStore(db).owned() == {"1": (-99_990, None)}

    fb.requeue("1")
    again = CliRunner().invoke(cli, ["schedd", "reset", "--state-db", str(db)])
    assert again.exit_code == 0, again.output
    assert fb.job_list[0].nice == 0 and StateStore(db).owned() == {}


def test_a_requeued_job_seen_completing_stays_the_daemons(tmp_path: Path) -> None:
    """Slurm 22.05 shows a job requeued moments ago as COMPLETING until its epilog ends. A
    cycle that saw it so dropped its record (neither pending nor running), and once pending
    the Nice the daemon had set right after the requeue read as the user's."""
    fb = FakeBackend([running("1")], [gpu_node("v1", "v100")])
    store = StateStore(tmp_path / "s.db")
    policy, clock = Scripted(), Clock(30_000.0)
    daemon = _daemon(fb, store, policy, clock)
    policy.decisions = [Decision("1", requeue=True, nice=90_000)]
    daemon.step()
    assert fb.requeued == ["1"] and fb.job_list[0].nice == -10_000
    fb.job_list[0] = replace(fb.job_list[0], state=JobState.COMPLETING)  # the epilog runs
    clock.t, policy.decisions = 30_060.0, []
    daemon.step()
    fb.job_list[0] = replace(fb.job_list[0], state=JobState.PENDING)
    clock.t, policy.decisions = 30_120.0, [Decision("1", nice=500)]
    daemon.step()
    assert fb.job_list[0].nice == -99_500, daemon.last_result


def test_a_job_whose_owner_revoked_the_opt_in_since_observed_is_not_requeued() -> None:
    """The daemon reads the job again right before `scontrol requeue` but checked only that it
    still ran: a job whose owner dropped checkpoint=yes from its description meanwhile (so it
    would restart from scratch) was requeued all the same."""
    from slurm_hase.daemon.cycle import run_cycle
    from slurm_hase.policy.usage import UsageLedger
    from tests.unit.test_daemon_requeue import NO_CKPT

    fb = FakeBackend([running("1"), running("2")], [gpu_node("v1", "v100")])

    class RevokedWhileDeciding(Scripted):
        def decide(self, state: ClusterState) -> list[Decision]:
            fb.job_list[0] = replace(fb.job_list[0], comment=NO_CKPT)
            return super().decide(state)

    policy = RevokedWhileDeciding()
    policy.decisions = [Decision("1", requeue=True), Decision("2", requeue=True)]
    result = run_cycle(fb, policy, Est(), Clock(30_000.0), UsageLedger(3600.0), {}, CONFIG)
    assert fb.requeued == ["2"] and result.requeued == ["2"]
    assert dict(result.skipped)["1"] == "requeue refused: no longer opted in since observed"
    assert fb.job_list[0].state is JobState.RUNNING
