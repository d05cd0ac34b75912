"""Faults a production queue has, found in review (session 42): jobs that wait on other than GPUs,
a job restarted between observe and requeue, an unwritable store, a moved job with nothing of
the daemon's left."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import replace

import pytest

from slurm_hase.daemon.cycle import (
    CycleConfig,
    CycleResult,
    JobEstimate,
    QuietWatch,
    RuntimeEstimator,
    run_cycle,
)
from slurm_hase.daemon.fake import FakeBackend, gpu_node
from slurm_hase.daemon.loop import Daemon, LoopSettings
from slurm_hase.daemon.records import waits_on_other
from slurm_hase.policy.registry import make_policy
from slurm_hase.policy.types import Decision
from slurm_hase.policy.usage import UsageLedger
from slurm_hase.slurm.types import GpuRequest, Job, JobState
from slurm_hase.store.state import StateStore
from tests.unit.test_daemon_cycle import Clock, Scripted, pjob
from tests.unit.test_daemon_requeue import CKPT, Est, running

NOW = 100_000.0  # the cycles' clock


class LongRunning:
    """Running jobs have 500,000 s to go, pending ones take an hour; CKPT opts in."""

    def estimate(self, job: Job, types: object) -> JobEstimate:
        rt = 500_000.0 if job.state is JobState.RUNNING else 3600.0
        return JobEstimate({"v100": rt}, checkpoint='"ckpt":1' in job.comment)


def _running(job_id: str, account: str) -> Job:
    return Job(job_id=job_id, name="train", user="u" + account, account=account, partition="gpu",
               state=JobState.RUNNING, gpu=GpuRequest(1, None, "job"), alloc_gpus={"v100": 1},
               start_time=1000, time_limit_s=1_000_000, comment=CKPT, requeue=True)


def _waiting(job_id: str, reason: str) -> Job:
    return Job(job_id=job_id, name="post", user="us", account="small", partition="gpu",
               state=JobState.PENDING, reason=reason, gpu=GpuRequest(1, None, "job"),
               submit_time=50_000, time_limit_s=3600)


@pytest.mark.parametrize("reason", ["Dependency", "DependencyNeverSatisfied",
                                    "JobArrayTaskLimit", "AssocGrpGRES", "QOSMaxGRESPerUser"])
def test_a_job_waiting_on_other_than_gpus_has_no_running_job_requeued_for_it(reason: str) -> None:
    # account big holds both GPUs with opted-in jobs; small's only job cannot start anyway
    fb = FakeBackend([_running("1", "big"), _running("2", "big"), _waiting("3", reason)],
                     [gpu_node("v1", "v100", gpus=2, alloc=2)])
    clock, ledger, owned = Clock(NOW), UsageLedger(3600.0), {}
    requeued: list[str] = []
    for _ in range(6):
        res = run_cycle(fb, make_policy("fair"), LongRunning(), clock, ledger,
                        {"big": 1.0, "small": 1.0}, CycleConfig(requeue=True, refresh_s=0),
                        owned=owned)
        requeued += res.requeued
        clock.t += 700
    assert requeued == []
    assert res.pending == 0  # observed, no record


def test_the_same_job_ready_to_start_does_get_a_gpu_rotated_to_it() -> None:
    # the control: with reason Priority the fair policy does requeue one of big's jobs for it,
    # so the test above would fail if waits_on_other were ignored
    fb = FakeBackend([_running("1", "big"), _running("2", "big"), _waiting("3", "Priority")],
                     [gpu_node("v1", "v100", gpus=2, alloc=2)])
    res = run_cycle(fb, make_policy("fair"), LongRunning(), Clock(NOW), UsageLedger(3600.0),
                    {"big": 1.0, "small": 1.0}, CycleConfig(requeue=True, refresh_s=0), owned={})
    assert len(res.requeued) == 1


def beside_a_ready_job(other: Job, estimator: RuntimeEstimator,
                      config: CycleConfig) -> tuple[dict[str, str], CycleResult]:
    """One fair cycle on one A100 and one T4: `other` (account small, not served) beside a job
    "4" of account big (served) that can start now. The features applied by job id, and the
    cycle's result."""
    ready = Job(job_id="4", name="train", user="ub", account="big", partition="gpu",
                state=JobState.PENDING, reason="Priority", gpu=GpuRequest(1, None, "job"),
                submit_time=60_000, time_limit_s=100_000)
    fb = FakeBackend([other, ready], [gpu_node("a1", "a100", gpus=1), gpu_node("t1", "t4", gpus=1)])
    ledger = UsageLedger(86400.0)
    ledger.add_interval("big", 4.0, 10_000.0, 99_000.0)  # big was served, small was not
    res = run_cycle(fb, make_policy("fair"), estimator, Clock(NOW), ledger,
                    {"big": 1.0, "small": 1.0}, config)
    return {job_id: u.features for job_id, u in res.applied}, res


def test_a_waiting_job_takes_no_free_fast_gpu_from_a_job_that_can_start() -> None:
    class Speeds:
        def estimate(self, job: Job, types: object) -> JobEstimate:
            return JobEstimate({"a100": 3600.0, "t4": 6000.0})

    dep = replace(_waiting("3", "Dependency"), time_limit_s=100_000)
    features, _ = beside_a_ready_job(dep, Speeds(), CycleConfig(refresh_s=0))
    assert features.get("4") in (None, "a100")
    assert "3" not in features


def test_waits_on_other_reads_slurms_reason_names() -> None:
    for reason in ("Resources", "Priority", "", "None", "ReqNodeNotAvail", "BadConstraints"):
        assert not waits_on_other(reason), reason  # GPUs (or the daemon's constraint) matter
    for reason in ("Dependency", "JobArrayTaskLimit", "AssocGrpGRESMinutes", "QOSGrpGRES"):
        assert waits_on_other(reason), reason
    assert not waits_on_other("BeginTime")  # a job requeued moments ago shows it


def test_a_dependency_met_ends_a_quiet_stretch() -> None:
    fb = FakeBackend([_waiting("3", "Dependency"), pjob("4")], [gpu_node("a1", "a100")])
    clock, watch, ledger = Clock(NOW), QuietWatch(), UsageLedger(3600.0)
    config = CycleConfig(refresh_s=600)
    policy = make_policy("fair")
    assert not run_cycle(fb, policy, Est(), clock, ledger, {}, config, watch=watch).quiet
    clock.t += 60
    assert run_cycle(fb, policy, Est(), clock, ledger, {}, config, watch=watch).quiet
    fb.job_list[0] = replace(fb.job_list[0], reason="Priority")  # the job it waited on ended
    clock.t += 60
    res = run_cycle(fb, policy, Est(), clock, ledger, {}, config, watch=watch)
    assert not res.quiet and "3" in res.pending_ids


def test_a_job_restarted_between_observe_and_requeue_is_not_requeued() -> None:
    fb = FakeBackend([running("7", start=1000), pjob("8")], [gpu_node("v1", "v100", alloc=1)])

    def slurm_restarts_7(job_id: str) -> None:
        if job_id == "8":  # while the daemon updates job 8, Slurm requeues and restarts job 7
            fb.job_list[0] = replace(fb.job_list[0], start_time=10_000, restarts=1)

    fb.before_update = slurm_restarts_7
    res = run_cycle(fb, Scripted([Decision("8", nice=5), Decision("7", requeue=True, nice=50)]),
                    Est(), Clock(10_100.0), UsageLedger(3600.0), {},
                    CycleConfig(requeue=True, requeue_min_run_s=600))
    assert res.requeued == []
    assert ("7", "requeue refused: restarted since observed") in res.skipped
    assert fb.job_list[0].restarts == 1


class FullStore(StateStore):
    """A store whose writes fail as on a full disk while `full` is set."""

    full = False

    def _transaction(self, fn: Callable[..., object]) -> None:  # type: ignore[override]
        if self.full:
            raise sqlite3.OperationalError("database or disk is full")
        super()._transaction(fn)


def test_nothing_is_sent_while_the_store_cannot_record_it(tmp_path: object) -> None:
    fb = FakeBackend([pjob("1")], [gpu_node("a1", "a100")])
    store = FullStore(":memory:")
    policy = Scripted([Decision("1", nice=40)])
    daemon = Daemon(fb, policy, Est(), Clock(NOW), store, CycleConfig(refresh_s=0), LoopSettings(),
                    shares={"a": 1.0})
    store.full = True
    daemon.step()
    assert fb.job_list[0].nice == 0 and fb.updates == []
    assert daemon.last_result is not None
    assert any("state store could not record it" in why for _, why in daemon.last_result.skipped)
    assert "1" not in daemon.owned
    store.full = False
    daemon.step()
    assert fb.job_list[0].nice == 40 and "1" in store.owned()


def test_a_moved_job_with_nothing_of_ours_left_is_forgotten_and_cycles_go_quiet() -> None:
    fb = FakeBackend([pjob("1"), pjob("2")], [gpu_node("a1", "a100")])
    policy = Scripted([Decision("1", nice=10), Decision("2", nice=20)])
    clock = Clock(10_000.0)
    store = StateStore(":memory:")
    daemon = Daemon(fb, policy, Est(), clock, store, CycleConfig(partitions=("gpu",), refresh_s=600),
                    LoopSettings(), shares={"a": 1.0})
    daemon.step()
    assert fb.job_list[0].nice == 10
    # the owner moves job 1 to partition cpu and sets a Nice of their own
    fb.job_list[0] = replace(fb.job_list[0], partition="cpu", nice=500)
    policy.decisions = [Decision("2", nice=20)]
    daemon.step()
    assert "1" not in daemon.owned and "1" not in store.owned()
    assert fb.job_list[0].nice == 500
    quiet = 0
    for _ in range(5):
        clock.t += 60
        daemon.step()
        assert daemon.last_result is not None
        quiet += daemon.last_result.quiet
    assert quiet == 5


def test_a_landed_update_of_unknown_outcome_stops_owning_the_older_value() -> None:
    """Features=v100 lands but its answer times out: a100 (set before) and v100 both count as
    the daemon's until an update is known to have landed. Slurm showing v100 is that proof;
    before, a100 stayed the daemon's, and a user who set a100 later was overwritten."""
    from tests.unit.test_faults_daemon import TimeoutAfterLanding

    fb = TimeoutAfterLanding([pjob("1")], [gpu_node("a1", "a100"), gpu_node("v1", "v100")])
    policy = Scripted([Decision("1", nice=10, gpu_types=("a100",))])
    store = StateStore(":memory:")
    daemon = Daemon(fb, policy, Est(), Clock(NOW), store, CycleConfig(refresh_s=0), LoopSettings(),
                    shares={"a": 1.0})
    daemon.step()
    fb.late = {"1"}
    policy.decisions = [Decision("1", nice=20, gpu_types=("v100",))]
    daemon.step()  # lands, the answer times out: both values the daemon's
    assert fb.job_list[0].features == "v100" and daemon.owned["1"].prev_features == "a100"
    fb.late = set()
    daemon.step()  # nothing to send; Slurm shows v100: a100 is the daemon's no longer
    assert daemon.last_result is not None and daemon.last_result.applied == []
    assert daemon.owned["1"].prev_features is None
    assert store.owned_rows()["1"] == (20, "v100", None, None)  # in the store too
    fb.job_list[0] = replace(fb.job_list[0], features="a100")  # the user's choice
    policy.decisions = [Decision("1", nice=40, gpu_types=("v100",))]
    daemon.step()
    assert fb.job_list[0].features == "a100"


def test_a_clock_stepped_back_is_the_ledgers_new_baseline() -> None:
    """A clock 30 days ahead for one observation, then stepped back by NTP: the ledger kept the
    bad time and counted nothing until the wall clock caught up with it."""
    from slurm_hase.policy.types import RunningJob

    job = RunningJob("9", "b", "u", "a100", 1, start_time=0.0, expected_end=1e9)
    ledger = UsageLedger(7 * 86400.0)
    ledger.observe([job], 1_000_000.0)
    ledger.observe([job], 1_000_000.0 + 30 * 86400.0)
    ledger.observe([job], 1_000_000.0 + 3600.0)  # stepped back
    before = ledger.usage()["b"]
    ledger.observe([job], 1_000_000.0 + 7200.0)
    assert ledger.usage()["b"] > before and ledger.last_time == 1_000_000.0 + 7200.0


def test_a_constraint_names_the_type_as_the_nodes_features_spell_it() -> None:
    """Slurm matches features by case: on a cluster whose nodes say Gres=gpu:A100, Features=A100
    (or gpu:a100 with Features=A100), `Features=a100` is refused (`Invalid feature
    specification`, seen on 22.05). The daemon lower-cased every type it sent."""
    nodes = [gpu_node("n1", "A100"), gpu_node("n2", "v100", features=("V100", "ib"))]
    fb = FakeBackend([pjob("1"), pjob("2")], nodes)
    policy = Scripted([Decision("1", nice=10, gpu_types=("a100", "v100")),
                       Decision("2", nice=10, gpu_types=("v100",))])
    owned: dict[str, object] = {}
    res = run_cycle(fb, policy, Est(), Clock(NOW), UsageLedger(3600.0), {}, CycleConfig(),
                    owned=owned)  # type: ignore[arg-type]
    assert {j: u.features for j, u in res.applied} == {"1": "A100|V100", "2": "V100"}
    policy.decisions = [Decision("1", nice=10, gpu_types=("v100", "a100")),  # another order
                        Decision("2", nice=10, gpu_types=("v100",))]
    again = run_cycle(fb, policy, Est(), Clock(NOW), UsageLedger(3600.0), {}, CycleConfig(),
                      owned=owned)  # type: ignore[arg-type]
    assert again.applied == []  # the same types: nothing sent
