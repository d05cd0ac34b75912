"""Ownership through faults, each driven through the daemon's loop with fakes:
a long slurmctld outage, a requeued job's update, a store write that fails, a batched update
that timed out, reset mid-way, a clock stepped back."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from slurm_hase.daemon.cycle import CycleConfig, JobEstimate
from slurm_hase.daemon.fake import FakeBackend, gpu_node
from slurm_hase.daemon.loop import Daemon, LoopSettings
from slurm_hase.daemon.reset import reset_decisions
from slurm_hase.daemon.safety import OwnedAttrs
from slurm_hase.errors import SlurmCommandError, SlurmTimeoutError
from slurm_hase.policy.types import ClusterState, Decision
from slurm_hase.slurm.types import GpuRequest, Job, JobState
from slurm_hase.store.state import StateStore

CKPT = '{"hase":1,"model":"resnet50","ckpt":1}'


class Clock:
    def now(self) -> float:
        return 10_000.0


class Est:
    def __init__(self, checkpoint: bool = False) -> None:
        self.checkpoint = checkpoint

    def estimate(self, job: Job, types: tuple[str, ...]) -> JobEstimate:
        return JobEstimate({t: 500.0 for t in types}, checkpoint=self.checkpoint)


class Pol:
    name, summary = "p", ""

    def __init__(self, decide: Callable[[ClusterState], list[Decision]]) -> None:
        self.decide = decide


def pending(job_id: str) -> Job:
    return Job(job_id=job_id, name="j", user="u", account="a", partition="gpu",
               state=JobState.PENDING, gpu=GpuRequest(1, None, "job"))


def test_a_days_long_outage_backs_off_at_the_cap_without_overflow(
        caplog: pytest.LogCaptureFixture) -> None:
    """2.0 ** (failures - 1) overflowed after 1,025 failed cycles (~3.5 days at the cap)."""
    caplog.set_level(logging.CRITICAL)
    fb = FakeBackend([], [gpu_node("a1", "a100")])
    d = Daemon(fb, Pol(lambda s: []), Est(), Clock(), StateStore(":memory:"), CycleConfig(),
               LoopSettings(backoff_s=5, backoff_max_s=300), shares={"a": 1.0})
    fb.unavailable = True
    delays = [d.step() for _ in range(1100)]
    assert delays[:3] == [5, 10, 20] and delays[-1] == 300 and d.failures == 1100


def test_what_is_set_on_a_job_right_after_its_requeue_stays_the_daemons() -> None:
    """The job was running when observed, so it was not among the pending jobs: its owned
    entry was dropped in the very cycle that set it, and the next cycle and reset took the
    daemon's own Nice for the user's."""
    job = Job(job_id="7", name="train", user="u", account="a", partition="gpu",
              state=JobState.RUNNING, gpu=GpuRequest(1, None, "job"), alloc_gpus={"v100": 1},
              start_time=1000, time_limit_s=100_000, comment=CKPT, requeue=True)
    fb = FakeBackend([job], [gpu_node("v1", "v100", alloc=1)])
    store = StateStore(":memory:")
    decisions: list[list[Decision]] = [[Decision("7", nice=500, requeue=True, reason="rotate")],
                                       [Decision("7", nice=100)]]
    d = Daemon(fb, Pol(lambda s: decisions.pop(0) if decisions else []), Est(checkpoint=True),
               Clock(), store, CycleConfig(requeue=True, refresh_s=0), LoopSettings(),
               shares={"a": 1.0})
    d.step()
    assert d.last_result is not None and d.last_result.requeued == ["7"]
    assert fb.job_list[0].state is JobState.PENDING and fb.job_list[0].nice == 500
    assert d.owned["7"].nice == 500 and store.owned()["7"] == (500, None)
    d.step()
    assert fb.job_list[0].nice == 100  # the daemon's 500 was not taken for the user's
    owned = {j: OwnedAttrs(*r) for j, r in store.owned_rows().items()}
    [undo] = reset_decisions(fb, owned, dry_run=True)
    assert (undo.job_id, undo.outcome, undo.update.nice) == ("7", "planned", 0)


class FullOnce(StateStore):
    """A store whose next write fails once with a full disk (a transient fault: kept)."""

    full = False

    def _transaction(self, fn: Any) -> None:
        if self.full:
            self.full = False
            raise sqlite3.OperationalError("database or disk is full")
        super()._transaction(fn)


def test_a_failed_cycle_write_still_forgets_the_jobs_that_left(
        caplog: pytest.LogCaptureFixture) -> None:
    """record_cycle and forget were one try: when the cycle row could not be written, the
    owned rows of jobs that ended were never dropped from the store."""
    caplog.set_level(logging.CRITICAL)
    fb = FakeBackend([pending("1"), pending("2")], [gpu_node("a1", "a100")])
    store = FullOnce(":memory:")
    d = Daemon(fb, Pol(lambda s: [Decision(p.job_id, nice=40) for p in s.pending]), Est(),
               Clock(), store, CycleConfig(refresh_s=0), LoopSettings(), shares={"a": 1.0})
    d.step()
    assert set(store.owned()) == {"1", "2"}
    del fb.job_list[0]  # job 1 ended and left squeue
    store.full = True
    d.step()
    d.step()
    assert set(store.owned()) == set(d.owned) == {"2"}


class LateBatch(FakeBackend):
    """slurmctld applies a batched update to every job of the list, then scontrol times out."""

    late = True

    def update_job(self, job_id: str, update: Any) -> None:
        super().update_job(job_id, update)
        if "," in job_id and self.late:
            self.late = False
            raise SlurmTimeoutError(["scontrol", "update", f"jobid={job_id}"], 60.0)


def test_a_batched_update_of_unknown_outcome_keeps_every_job_of_the_batch_owned(
        caplog: pytest.LogCaptureFixture) -> None:
    """Only the batch's first job kept the daemon's values; the others went back to their old
    entries, and the next cycle took the daemon's own Nice 40 for the user's."""
    caplog.set_level(logging.CRITICAL)
    fb = LateBatch([pending("1"), pending("2"), pending("3")], [gpu_node("a1", "a100")])
    fb.accepts_lists = True
    nice = [40]
    d = Daemon(fb, Pol(lambda s: [Decision(p.job_id, nice=nice[0]) for p in s.pending]), Est(),
               Clock(), StateStore(":memory:"), CycleConfig(refresh_s=0, batch_updates=True),
               LoopSettings(), shares={"a": 1.0})
    d.step()
    assert {j.job_id: j.nice for j in fb.job_list} == {"1": 40, "2": 40, "3": 40}
    assert {j: o.nice for j, o in d.owned.items()} == {"1": 40, "2": 40, "3": 40}
    nice[0] = 20
    d.step()
    assert {j.job_id: j.nice for j in fb.job_list} == {"1": 20, "2": 20, "3": 20}


def test_reset_goes_on_past_a_started_job_and_stops_at_a_hung_controller() -> None:
    """A job that started since it was read ("no longer pending") is gone, not an error; a
    timeout no longer aborts reset with the jobs already reset left in the store: its outcome
    is unknown and the rest are not tried, each kept as an error."""
    fb = FakeBackend([pending(j) for j in ("1", "2", "3", "4")], [gpu_node("a1", "a100")])
    fb.job_list = [replace(j, nice=40) for j in fb.job_list]
    fb.fail_updates = {
        "2": SlurmCommandError(["scontrol", "update"], 1, "Job is no longer pending execution"),
        "3": SlurmTimeoutError(["scontrol", "update"], 60.0)}
    out = {o.job_id: o for o in reset_decisions(fb, {j: OwnedAttrs(40, None) for j in "1234"})}
    assert [out[j].outcome for j in "1234"] == ["reset", "gone", "error", "error"]
    assert "outcome unknown" in out["3"].detail and out["4"].detail.startswith("not tried")
    assert {j.job_id: j.nice for j in fb.job_list} == {"1": 0, "2": 40, "3": 40, "4": 40}


def test_an_update_of_one_attribute_keeps_both_values_of_the_other() -> None:
    """Nice 40 landed; Nice 20's outcome is unknown (both are the daemon's); then only the
    Features are updated: Nice 40, which is what Slurm shows, must stay the daemon's (it was
    dropped, and the daemon then left 'the user's' Nice 40 alone for good)."""
    from slurm_hase.daemon.safety import record_intent, record_owned
    from slurm_hase.slurm.types import JobUpdate

    owned: dict[str, OwnedAttrs] = {"1": OwnedAttrs(nice=40)}
    record_intent(owned, "1", JobUpdate(nice=20))  # sent; its outcome never known
    assert owned["1"].owns_nice(40) and owned["1"].owns_nice(20)
    record_intent(owned, "1", JobUpdate(features="a100"))
    assert owned["1"].owns_nice(40) and owned["1"].owns_nice(20)
    record_owned(owned, "1", JobUpdate(features="a100"))  # landed: the Nice is still unknown
    assert owned["1"].owns_nice(40) and owned["1"].owns_features("a100")
    record_owned(owned, "1", JobUpdate(nice=10))  # a Nice that landed settles it
    assert owned["1"] == OwnedAttrs(nice=10, features="a100")


def test_a_clock_stepped_back_does_not_stretch_the_quiet_cycles() -> None:
    """refresh_s bounds how long nothing is decided; after the clock stepped back an hour (an
    NTP fix), 69 quiet cycles (69 min) went by before the next decision."""
    from slurm_hase.daemon.cycle import QuietWatch, run_cycle
    from slurm_hase.policy.usage import UsageLedger

    class Stepping:
        t = 100_000.0

        def now(self) -> float:
            return self.t

    decided = [0]

    def decide(state: ClusterState) -> list[Decision]:
        decided[0] += 1
        return []

    fb = FakeBackend([pending("1")], [gpu_node("a1", "a100")])
    clock, watch, ledger = Stepping(), QuietWatch(), UsageLedger(3600.0)
    config = CycleConfig(refresh_s=600)
    run_cycle(fb, Pol(decide), Est(), clock, ledger, {}, config, watch=watch, owned={})
    clock.t -= 3600
    clock.t += 60
    assert not run_cycle(fb, Pol(decide), Est(), clock, ledger, {}, config, watch=watch,
                         owned={}).quiet
    assert decided[0] == 2
    clock.t += 60  # the clock runs on from there: quiet again until refresh_s
    assert run_cycle(fb, Pol(decide), Est(), clock, ledger, {}, config, watch=watch,
                     owned={}).quiet
