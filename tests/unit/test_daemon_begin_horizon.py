"""A pending job whose begin time (--begin; Slurm's EligibleTime) is past
CycleConfig.begin_horizon_s may not start now (session 43): nothing is requeued for it, it takes
no free GPU from a job that can start, it still gets its Nice and constraint, and quiet cycles
wake when it comes close."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurm_hase.daemon.cycle import CycleConfig, JobEstimate, QuietWatch, run_cycle
from slurm_hase.daemon.fake import FakeBackend, gpu_node
from slurm_hase.daemon.records import DEFAULT_BEGIN_HORIZON_S, begins_later
from slurm_hase.policy.registry import make_policy
from slurm_hase.policy.usage import UsageLedger
from slurm_hase.slurm.types import Job
from tests.unit.test_daemon_cycle import Clock, pjob
from tests.unit.test_daemon_requeue import Est
from tests.unit.test_daemon_review42 import (
    NOW,
    LongRunning,
    _running,
    _waiting,
    beside_a_ready_job,
)

HOUR = 3600


def _begins_at(job_id: str, eligible: float) -> Job:
    return replace(_waiting(job_id, "BeginTime"), eligible_time=int(eligible))


def _rotations(begin: float, cycles: int = 4) -> list[str]:
    # account big holds both GPUs with opted-in jobs; small's only job begins at `begin`
    fb = FakeBackend([_running("1", "big"), _running("2", "big"), _begins_at("3", begin)],
                     [gpu_node("v1", "v100", gpus=2, alloc=2)])
    clock, ledger, owned = Clock(NOW), UsageLedger(3600.0), {}
    requeued: list[str] = []
    for _ in range(cycles):
        res = run_cycle(fb, make_policy("fair"), LongRunning(), clock, ledger,
                        {"big": 1.0, "small": 1.0}, CycleConfig(requeue=True, refresh_s=0),
                        owned=owned)
        requeued += res.requeued
        clock.t += 60
    return requeued


def test_no_running_job_is_requeued_for_a_job_that_begins_hours_ahead() -> None:
    assert _rotations(NOW + 2 * HOUR) == []


def test_a_job_just_requeued_by_slurm_is_still_planned_for() -> None:
    # Slurm's requeue hold: EligibleTime = the requeue + cred_expire (120 s) + 1 s. The control
    # of the test above: within the horizon the fair policy rotates a GPU to the job
    assert len(_rotations(NOW + 121, cycles=1)) == 1


@pytest.mark.parametrize(("horizon_s", "ready_gets"), [(300.0, "a100"), (1e9, "t4")])
def test_a_job_that_begins_later_takes_no_free_fast_gpu_from_one_that_can_start(
        horizon_s: float, ready_gets: str) -> None:
    # the later job gains most from the one A100 (20,000 s on the T4) and leads the fair order;
    # the control (a horizon past its begin time) gives it the A100 and the ready job the T4
    class Speeds:
        def estimate(self, job: Job, types: object) -> JobEstimate:
            return JobEstimate({"a100": 3600.0, "t4": 20000.0 if job.job_id == "3" else 4000.0})

    later = replace(_begins_at("3", NOW + 6 * HOUR), time_limit_s=100_000)
    features, res = beside_a_ready_job(later, Speeds(),
                                       CycleConfig(refresh_s=0, begin_horizon_s=horizon_s))
    assert features["4"] == ready_gets
    # the later job is still ordered and routed, ready for when it may start
    assert features["3"] == "a100" and res.pending == 2


def test_quiet_cycles_wake_when_the_job_comes_within_the_horizon() -> None:
    begin = NOW + 1000
    fb = FakeBackend([_begins_at("3", begin), pjob("4")], [gpu_node("a1", "a100")])
    clock, watch, ledger = Clock(NOW), QuietWatch(), UsageLedger(3600.0)
    config = CycleConfig(refresh_s=3600, begin_horizon_s=300)
    policy = make_policy("fair")
    first = run_cycle(fb, policy, Est(), clock, ledger, {}, config, watch=watch)
    assert not first.quiet and first.pending == 2 and watch.wake_at == begin - 300
    clock.t = begin - 301
    assert run_cycle(fb, policy, Est(), clock, ledger, {}, config, watch=watch).quiet
    clock.t = begin - 300  # nothing in Slurm changed, but the job may start within 300 s now
    res = run_cycle(fb, policy, Est(), clock, ledger, {}, config, watch=watch)
    assert not res.quiet and watch.wake_at == float("inf")


def test_a_begin_time_moved_ends_a_quiet_stretch() -> None:
    fb = FakeBackend([_begins_at("3", NOW + 5 * HOUR), pjob("4")], [gpu_node("a1", "a100")])
    clock, watch, ledger = Clock(NOW), QuietWatch(), UsageLedger(3600.0)
    config = CycleConfig(refresh_s=3600)
    policy = make_policy("fair")
    assert watch.wake_at == float("inf")
    assert run_cycle(fb, policy, Est(), clock, ledger, {}, config, watch=watch).pending == 2
    assert watch.wake_at == NOW + 5 * HOUR - DEFAULT_BEGIN_HORIZON_S
    clock.t += 60
    assert run_cycle(fb, policy, Est(), clock, ledger, {}, config, watch=watch).quiet
    # `scontrol update StartTime=now`: Slurm sets EligibleTime to now
    fb.job_list[0] = replace(fb.job_list[0], eligible_time=int(clock.t))
    clock.t += 60
    res = run_cycle(fb, policy, Est(), clock, ledger, {}, config, watch=watch)
    assert not res.quiet and watch.wake_at == float("inf")


def test_begins_later_reads_the_eligible_time_against_the_horizon() -> None:
    job = _waiting("3", "BeginTime")
    assert begins_later(job, NOW, 300) is None  # no eligible time known (the simulator's)
    assert begins_later(replace(job, eligible_time=int(NOW) + 300), NOW, 300) is None
    assert begins_later(replace(job, eligible_time=int(NOW) + 301), NOW, 300) == NOW + 1
    assert DEFAULT_BEGIN_HORIZON_S > 121  # past Slurm's default requeue hold
