"""Idle fill takes only GPUs that are idle now, not busy ones the timeline shows at now."""

from __future__ import annotations

from slurm_hase.policy.fair import FairPolicy
from slurm_hase.policy.types import ClusterState, Decision, GpuPool, PendingJob, RunningJob

NOW = 100_000.0
LONG = {"v100": 10_000.0, "k80": 40_000.0}  # k80 at 0.25 x its best speed
JOB = PendingJob("1", "a", "u", NOW - 100, 2, LONG, preemptible=True)
V100_BUSY = RunningJob("90", "b", "u", "v100", 2, NOW - 3600, NOW + 20_000)


def types(pending: list[PendingJob], running: list[RunningJob], k80_free: int
          ) -> dict[str, tuple[str, ...] | None]:
    pools = {"v100": GpuPool("v100", 2, 0), "k80": GpuPool("k80", 4, k80_free)}
    out: list[Decision] = FairPolicy(theta=0.0, idle_fill=0.5).decide(
        ClusterState(NOW, pools, pending, running))
    return {d.job_id: d.gpu_types for d in out if not d.requeue}


def test_k80s_held_past_their_expected_end_are_not_idle() -> None:
    # the daemon clamps an overrunning job's expected end to now: its k80s looked free now,
    # and the job was constrained to the k80 alone, at the front, though none is idle
    overdue = RunningJob("91", "c", "u", "k80", 4, NOW - 50_000, NOW)
    assert types([JOB], [V100_BUSY, overdue], k80_free=0) == {"1": ("v100",)}


def test_k80s_busy_with_jobs_the_state_does_not_list_are_not_idle() -> None:
    assert types([JOB], [V100_BUSY], k80_free=0) == {"1": ("v100",)}


def test_idle_k80s_are_still_filled() -> None:
    assert types([JOB], [V100_BUSY], k80_free=4) == {"1": ("k80",)}
    # two free: the 2-GPU job fits, a second one does not
    two = [JOB, PendingJob("2", "a", "u", NOW - 99, 2, LONG, preemptible=True)]
    assert types(two, [V100_BUSY], k80_free=2)["1"] == ("k80",)
    assert types(two, [V100_BUSY], k80_free=2)["2"] == ("v100",)
