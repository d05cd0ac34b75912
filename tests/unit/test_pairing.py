"""Pairing waiting jobs on one GPU through MPS: the policy's choice (policy/pairing.py, fair's
share_gain), the descriptor's opt-in (share=yes), the daemon's record, plan and cycle (only on a
Slurm that applies a pending job's gres update), and the simulated Slurm doing what 24.11 does."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from slurm_hase.daemon.cycle import CycleConfig, JobEstimate, run_cycle
from slurm_hase.daemon.fake import FakeBackend, gpu_node
from slurm_hase.daemon.safety import plan_updates
from slurm_hase.errors import DescriptorError, PolicyError
from slurm_hase.policy.fair import FairPolicy
from slurm_hase.policy.pairing import plan_shares
from slurm_hase.policy.types import ClusterState, Decision, GpuPool, PendingJob, RunningJob
from slurm_hase.policy.usage import UsageLedger
from slurm_hase.predict.descriptor import WorkloadDescriptor
from slurm_hase.slurm.tres import convertible_to_share, updates_pending_gres
from slurm_hase.slurm.types import GpuRequest, Job, JobState, JobUpdate

POOL = GpuPool("v100", total_gpus=8, free_gpus=0, nodes=2, gpus_per_node=4, mps_capacity=100)


def pending(jid: str, *, account: str = "big", share: bool = True, slow: float = 1.25,
            fraction: float = 1.0) -> PendingJob:
    return PendingJob(jid, account, "u", 0.0, 1, {"v100": 3600.0}, gpu_fraction=fraction,
                      mps_slowdown={"v100": slow}, may_share=share)


def running(jid: str, *, account: str = "big", fraction: float = 1.0) -> RunningJob:
    return RunningJob(jid, account, "u", "v100", 1, 0.0, 7200.0, gpu_fraction=fraction)


def state(jobs: Sequence[PendingJob], run: Sequence[RunningJob] = ()) -> ClusterState:
    return ClusterState(now=100.0, pools={"v100": POOL}, pending=list(jobs), running=list(run))


def shares(jobs: Sequence[PendingJob], run: Sequence[RunningJob] = (), *, gain: float = 1.5,
           min_level: float = 0.0, slots: float = 2.0, starting: set[str] | None = None,
           levels: tuple[dict[str, float], dict[str, float]] | None = None) -> dict[str, int]:
    routed = {j.job_id: ["v100"] for j in jobs}
    return plan_shares(jobs, routed, starting or set(), state(jobs, run), levels, gain,
                       min_level, slots)


def test_a_waiting_job_that_opted_in_becomes_half_a_gpu_when_the_pair_gains_enough() -> None:
    # 2 / 1.25 = 1.6 >= 1.5: half of the type's 100 MPS units per GPU
    assert shares([pending("1")]) == {"1": 50}
    # 2 / 1.4 = 1.43 < 1.5; no slowdown known; not opted in; starting now on a whole GPU
    assert shares([pending("1", slow=1.4)]) == {}
    assert shares([pending("1", slow=0.0)]) == {}
    assert shares([pending("1", share=False)]) == {}
    assert shares([pending("1")], starting={"1"}) == {}


def test_shares_per_type_are_bounded_by_the_nodes_slurm_can_share_a_gpu_on() -> None:
    jobs = [pending(str(i)) for i in range(6)]
    # 2 slots x 2 nodes = 4, in the order given
    assert list(shares(jobs)) == ["0", "1", "2", "3"]
    # a share running and one waiting already take two of them
    jobs = [pending("w", fraction=0.5), *jobs]
    assert list(shares(jobs, [running("r", fraction=0.5), running("x")])) == ["0", "1"]
    assert shares(jobs, slots=0.5) == {}  # one slot, taken by the waiting share


def test_only_accounts_near_their_entitlement_pay_with_shared_gpus() -> None:
    jobs = [pending("1", account="big"), pending("2", account="small")]
    held = {"big": 4.0, "small": 1.0}
    entitled = {"big": 4.0, "small": 4.0}  # big at 1.0, small at 0.25 of its entitlement
    assert shares(jobs, min_level=0.8, levels=(held, entitled)) == {"1": 50}
    assert shares(jobs, min_level=0.8, levels=None) == {}  # no levels: nobody is known to be
    assert shares(jobs, min_level=0.0) == {"1": 50, "2": 50}


def test_fair_decides_shares_only_when_the_knob_is_on() -> None:
    st = state([pending("1"), pending("2", share=False)], [running("r")])
    by_id = {d.job_id: d for d in FairPolicy(share_gain=1.5, share_level=0.0).decide(st)}
    assert by_id["1"].mps_share == 50 and "shares a GPU (MPS 50)" in by_id["1"].reason
    assert "2" not in by_id or by_id["2"].mps_share is None
    assert all(d.mps_share is None for d in FairPolicy().decide(st))
    with pytest.raises(PolicyError, match="share_gain"):
        FairPolicy(share_gain=2.5)


def test_the_descriptor_carries_the_opt_in() -> None:
    d = WorkloadDescriptor.from_mapping({"model": "resnet50", "share": "yes"})
    assert d.may_share
    text = d.to_comment()
    assert '"share":1' in text
    back = WorkloadDescriptor.from_comment(text)
    assert back is not None and back.may_share
    assert not WorkloadDescriptor.from_mapping({"may-share": "no"}).may_share
    with pytest.raises(DescriptorError, match="share"):
        WorkloadDescriptor.from_mapping({"share": "maybe"})


@pytest.mark.parametrize(("version", "applies"), [
    ("22.05.8", False), ("23.11.4", False), ("24.11.5", True), ("25.05.0", True),
    ("sim-24.11", True), ("fake-0", False), ("", False)])
def test_which_slurm_applies_a_pending_jobs_gres_update(version: str, applies: bool) -> None:
    assert updates_pending_gres(version) is applies


def test_which_requests_can_become_a_share() -> None:
    assert convertible_to_share(GpuRequest(1, None, "node"))
    assert not convertible_to_share(GpuRequest(1, None, "job"))  # --gpus=1: TresPerJob
    assert not convertible_to_share(GpuRequest(2, None, "node"))
    assert not convertible_to_share(GpuRequest(1, "v100", "node"))  # the pin would be lost
    assert not convertible_to_share(GpuRequest(0, None, "node", mps=50))  # a share already


def pjob(jid: str, gpu: GpuRequest, comment: str = "") -> Job:
    return Job(job_id=jid, name="train", user="u", account="big", partition="gpu",
               state=JobState.PENDING, gpu=gpu, submit_time=50, comment=comment)


def test_the_plan_asks_the_share_only_of_a_slurm_that_applies_it() -> None:
    jobs = [pjob("1", GpuRequest(1, None, "node")), pjob("2", GpuRequest(1, None, "job"))]
    decisions = [Decision("1", mps_share=50), Decision("2", mps_share=50)]
    notes: list[tuple[str, str]] = []
    planned = plan_updates(decisions, jobs, skipped=notes, shares_ok=True)
    assert planned == [("1", JobUpdate(tres_per_node="gres/mps:50"))]
    assert notes == [("2", "asks no single untyped GPU per node; MPS share not set")]
    notes.clear()
    assert plan_updates(decisions[:1], jobs, skipped=notes, shares_ok=False) == []
    assert "24.11 or later" in notes[0][1]


class ShareEstimator:
    def estimate(self, job: Job, gpu_types: Sequence[str]) -> JobEstimate | None:
        desc = WorkloadDescriptor.from_comment(job.comment)
        return JobEstimate({t: 3600.0 for t in gpu_types}, mps_slowdown={"v100": 1.2},
                           may_share=desc is not None and desc.may_share)


class Clock:
    def now(self) -> float:
        return 100.0


@pytest.mark.parametrize(("release", "converted"), [("24.11.5", True), ("22.05.8", False)])
def test_a_cycle_turns_an_opted_in_job_into_a_share_on_24_11_only(release: str,
                                                                   converted: bool) -> None:
    opted = WorkloadDescriptor(model="resnet50", may_share=True).to_comment()
    plain = WorkloadDescriptor(model="resnet50").to_comment()
    nodes = [gpu_node("v1", "v100", alloc=4, mps=400), gpu_node("v2", "v100", alloc=4, mps=400)]
    run = [Job(job_id=f"r{i}", name="train", user="u", account="big", partition="gpu",
               state=JobState.RUNNING, gpu=GpuRequest(1, None, "job"), alloc_gpus={"v100": 1},
               start_time=50, time_limit_s=10_000) for i in range(8)]
    fb = FakeBackend([pjob("1", GpuRequest(1, None, "node"), opted),
                      pjob("2", GpuRequest(1, None, "node"), plain), *run], nodes)
    fb.slurm_version = release
    policy = FairPolicy(share_gain=1.5, share_level=0.0, rotate=0.0)
    res = run_cycle(fb, policy, ShareEstimator(), Clock(), UsageLedger(3600.0), {"big": 1.0},
                    CycleConfig(partitions=("gpu",)))
    asked = [(j, u.tres_per_node) for j, u in fb.updates if u.tres_per_node is not None]
    assert asked == ([("1", "gres/mps:50")] if converted else [])
    # on 22.05 the job is not offered as one that may share, so nothing is planned or refused
    assert not any("MPS share" in why for _, why in res.skipped)
