"""Requeue decisions through run_cycle: safety rules, Nice after the requeue, faults."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from slurm_hase.daemon.cycle import CycleConfig, CycleResult, JobEstimate, OwnedAttrs, run_cycle
from slurm_hase.daemon.fake import FakeBackend, gpu_node
from slurm_hase.daemon.requeue import opted_in
from slurm_hase.errors import JobNotFoundError, SlurmCommandError, SlurmUnavailableError
from slurm_hase.policy.types import ClusterState, Decision
from slurm_hase.policy.usage import UsageLedger
from slurm_hase.slurm.types import GpuRequest, Job, JobState, JobUpdate

CKPT = '{"hase":1,"model":"resnet50","ckpt":1}'
NO_CKPT = '{"hase":1,"model":"resnet50"}'


class Clock:
    def now(self) -> float:
        return 10_000.0


class Est:
    def estimate(self, job: Job, gpu_types: Sequence[str]) -> JobEstimate | None:
        return JobEstimate({t: 500.0 for t in gpu_types}, checkpoint='"ckpt":1' in job.comment)


class Scripted:
    name = "scripted"
    summary = "test"

    def __init__(self, decisions: list[Decision]) -> None:
        self.decisions = decisions
        self.seen: list[ClusterState] = []

    def decide(self, state: ClusterState) -> list[Decision]:
        self.seen.append(state)
        return list(self.decisions)


def running(jid: str, comment: str = CKPT, *, requeue: bool = True, start: int = 1000,
            nice: int = 0) -> Job:
    return Job(job_id=jid, name="train", user="u", account="a", partition="gpu",
               state=JobState.RUNNING, gpu=GpuRequest(1, None, "job"), alloc_gpus={"v100": 1},
               start_time=start, time_limit_s=100_000, comment=comment, requeue=requeue,
               nice=nice)


def cycle(fb: FakeBackend, decisions: list[Decision], *, on: bool = True, dry: bool = False,
          owned: dict[str, OwnedAttrs] | None = None, **cfg: float) -> CycleResult:
    config = CycleConfig(requeue=on, dry_run=dry, nice_scale=3, **cfg)  # type: ignore[arg-type]
    return run_cycle(fb, Scripted(decisions), Est(), Clock(), UsageLedger(3600.0), {}, config,
                     owned=owned)


def nodes() -> list:  # type: ignore[type-arg]
    return [gpu_node("v1", "v100", alloc=4)]


def test_opt_in_needs_checkpoint_descriptor_and_slurm_requeue() -> None:
    assert opted_in(running("1"))
    assert not opted_in(running("1", NO_CKPT))
    assert not opted_in(running("1", requeue=False))
    assert not opted_in(running("1", "free text, no descriptor"))
    assert not opted_in(running("1", '{"hase":1,"ckpt":"perhaps"}'))


def test_state_marks_only_opted_in_running_jobs_preemptible() -> None:
    fb = FakeBackend([running("1"), running("2", NO_CKPT), running("3", requeue=False)], nodes())
    pol = Scripted([])
    run_cycle(fb, pol, Est(), Clock(), UsageLedger(3600.0), {}, CycleConfig(requeue=True))
    assert {r.job_id: r.preemptible for r in pol.seen[0].running} == {
        "1": True, "2": False, "3": False}
    # with requeue off (the default) the policy may plan no rotation at all
    run_cycle(fb, pol, Est(), Clock(), UsageLedger(3600.0), {}, CycleConfig(refresh_s=0))
    assert not any(r.preemptible for r in pol.seen[1].running)


def test_state_carries_a_pending_jobs_requeue_count() -> None:
    fb = FakeBackend([running("1"), running("2")], nodes())
    cycle(fb, [Decision("1", requeue=True)])
    pol = Scripted([])
    run_cycle(fb, pol, Est(), Clock(), UsageLedger(3600.0), {}, CycleConfig(requeue=True))
    assert [(p.job_id, p.restarts, p.preemptible) for p in pol.seen[0].pending] == [("1", 1, True)]
    # with requeue off it is not offered as preemptible (idle fill would strand it)
    run_cycle(fb, pol, Est(), Clock(), UsageLedger(3600.0), {}, CycleConfig(refresh_s=0))
    assert [(p.job_id, p.preemptible) for p in pol.seen[1].pending] == [("1", False)]


def test_requeue_applied_then_nice_and_type_set_for_the_wait() -> None:
    fb = FakeBackend([running("1"), running("2")], [*nodes(), gpu_node("a1", "a100")])
    owned: dict[str, OwnedAttrs] = {}
    res = cycle(fb, [Decision("1", requeue=True, nice=40, gpu_types=("a100",))], owned=owned)
    assert res.requeued == ["1"] and fb.requeued == ["1"]
    assert res.applied == [("1", JobUpdate(nice=120, features="a100"))]  # 40 * nice_scale 3
    job = next(j for j in fb.job_list if j.job_id == "1")
    assert job.state is JobState.PENDING and job.restarts == 1 and job.nice == 120
    assert job.features == "a100" and owned["1"] == OwnedAttrs(nice=120, features="a100")
    # a type no node offers is dropped, the requeue still happens
    fb2 = FakeBackend([running("1")], nodes())
    res2 = cycle(fb2, [Decision("1", requeue=True, gpu_types=("h100",))])
    assert res2.requeued == ["1"] and res2.applied == []


def test_safety_refusals_are_reported_and_nothing_is_requeued() -> None:
    fb = FakeBackend([running("1", NO_CKPT), running("2", start=9_900), running("3", nice=5)],
                     nodes())
    decisions = [Decision("1", requeue=True), Decision("2", requeue=True),
                 Decision("9", requeue=True)]
    res = cycle(fb, decisions)
    assert fb.requeued == [] and res.requeued == []
    why = dict(res.skipped)
    assert "not opted in" in why["1"] and "ran less than 600 s" in why["2"]
    assert "not running" in why["9"]
    twice = cycle(FakeBackend([running("3")], nodes()),
                  [Decision("3", requeue=True), Decision("3", requeue=True)])
    assert twice.requeued == ["3"] and twice.skipped == [("3", "requeue refused: asked twice")]
    off = cycle(fb, [Decision("3", requeue=True)], on=False)
    assert fb.requeued == [] and "requeue is off" in dict(off.skipped)["3"]
    dry = cycle(fb, [Decision("3", requeue=True)], dry=True)
    assert fb.requeued == [] and dry.requeued == []


def test_per_cycle_cap_and_user_nice_kept() -> None:
    fb = FakeBackend([running(str(i), nice=7 if i == 0 else 0) for i in range(5)], nodes())
    res = cycle(fb, [Decision(str(i), requeue=True, nice=10) for i in range(5)], requeue_max=2,
                owned={})
    assert fb.requeued == ["0", "1"]
    assert "more than 2 requeues" in dict(res.skipped)["2"]
    # job 0 had a Nice the user set: requeued, Nice left alone
    assert [j for j, _ in res.applied] == ["1"]
    assert next(j for j in fb.job_list if j.job_id == "0").nice == 7


def test_job_gone_or_controller_down_mid_requeue() -> None:
    fb = FakeBackend([running("1"), running("2")], nodes())

    orig = fb.requeue

    def requeue(job_id: str) -> None:  # job 1 finished between observe and act
        fb.job_list = [j for j in fb.job_list if j.job_id != "1"]
        orig(job_id)

    fb.requeue = requeue  # type: ignore[method-assign]
    res = cycle(fb, [Decision("1", requeue=True), Decision("2", requeue=True)])
    assert res.requeued == ["2"] and dict(res.skipped)["1"] == "job gone before requeue"

    fb2 = FakeBackend([running("1"), running("2")], nodes())

    def down(job_id: str) -> None:
        raise SlurmUnavailableError(["scontrol"], 1, "Unable to contact slurm controller")

    fb2.requeue = down  # type: ignore[method-assign]
    res2 = cycle(fb2, [Decision("1", requeue=True), Decision("2", requeue=True)])
    assert res2.unavailable and res2.requeued == [] and len(res2.errors) == 1


def test_requeue_refused_by_slurm_and_updates_after_a_requeue_that_fail() -> None:
    """Slurm refuses job 1's requeue: an error, and job 2 is still requeued. Job 2's Nice after
    its requeue is refused: the requeue stands, the update is skipped with why. Job 3's update
    finds slurmctld gone: unavailable, and job 4 is not tried."""
    fb = FakeBackend([running("1"), running("2"), running("3"), running("4")],
                     [*nodes(), gpu_node("a1", "a100")])
    orig = fb.requeue

    def requeue(job_id: str) -> None:
        if job_id == "1":
            raise SlurmCommandError(["scontrol", "requeue", "1"], 1,
                                    "Requested operation is presently disabled")
        orig(job_id)

    fb.requeue = requeue  # type: ignore[method-assign]
    fb.fail_updates = {
        "2": SlurmCommandError(["scontrol", "update"], 1, "Access/permission denied"),
        "3": SlurmUnavailableError(["scontrol", "update"], 1, "Unable to contact slurm controller"),
    }
    res = cycle(fb, [Decision(j, requeue=True, nice=40) for j in ("1", "2", "3", "4")],
                requeue_max=8)
    assert [j for j, _ in res.errors] == ["1", "3"] and "presently disabled" in dict(res.errors)["1"]
    assert res.requeued == ["2", "3"] and fb.requeued == ["2", "3"]
    assert dict(res.skipped)["2"].startswith("update after requeue: ")
    assert res.unavailable and res.applied == []


def test_job_that_ended_since_observed_is_not_requeued() -> None:
    # scontrol requeue brings a job that finished or was cancelled back to PENDING (seen on
    # 22.05 and 24.11; the fake does the same): one that ends while the cycle decides stays ended
    class EndsWhileDeciding(Scripted):
        def __init__(self, fb: FakeBackend, ended: JobState) -> None:
            super().__init__([Decision("1", requeue=True), Decision("2", requeue=True)])
            self.fb, self.ended = fb, ended

        def decide(self, state: ClusterState) -> list[Decision]:
            self.fb.job_list = [replace(j, state=self.ended) if j.job_id == "1" else j
                                for j in self.fb.job_list]
            return super().decide(state)

    for ended in (JobState.COMPLETED, JobState.CANCELLED):
        fb = FakeBackend([running("1"), running("2")], nodes())
        policy = EndsWhileDeciding(fb, ended)
        res = run_cycle(fb, policy, Est(), Clock(), UsageLedger(3600.0), {},
                        CycleConfig(requeue=True, nice_scale=3))
        assert res.requeued == ["2"] and fb.requeued == ["2"]
        assert dict(res.skipped)["1"] == f"requeue refused: {ended.value.lower()} since observed"
        assert next(j for j in fb.job_list if j.job_id == "1").state is ended


def test_fake_requeue_is_slurms() -> None:
    fb = FakeBackend([running("1"), replace(running("2"), state=JobState.CANCELLED),
                      replace(running("3"), state=JobState.PENDING)], nodes())
    fb.requeue("1")
    fb.requeue("2")  # as Slurm does: a cancelled job still known is revived
    assert [j.state for j in fb.job_list[:2]] == [JobState.PENDING, JobState.PENDING]
    with pytest.raises(SlurmCommandError, match="Job is pending execution for job 3"):
        fb.requeue("3")
    with pytest.raises(JobNotFoundError):
        fb.requeue("9")
