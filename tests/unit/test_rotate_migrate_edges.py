"""Rotation on records a real cluster may carry: migration (rotate.migrations) with
a runtime of 0 or inf on some type or a job past its expected end; an MPS share waiting."""

from __future__ import annotations

import math

from slurm_hase.policy.fair import FairPolicy
from slurm_hase.policy.rotate import rotation
from slurm_hase.policy.types import ClusterState, GpuPool, PendingJob, RunningJob

NOW = 10_000.0
POOLS = {"k80": GpuPool("k80", 1, 0, 1, 1), "v100": GpuPool("v100", 1, 1, 1, 1)}


def slow(runtime_s: dict[str, float], end: float = NOW + 40_000) -> RunningJob:
    return RunningJob("1", "a", "u", "k80", 1, NOW - 7200, end, relative_speed=0.25,
                      preemptible=True, runtime_s=runtime_s)


def migrate(job: RunningJob) -> list[tuple[str, tuple[str, ...] | None]]:
    out = rotation(ClusterState(NOW, POOLS, [], [job]), [], {}, min_run_s=0, max_per_cycle=8,
                   migrate_margin=0.3, restart_cost_s=300)
    return [(d.job_id, d.gpu_types) for d in out]


def test_a_zero_runtime_where_the_job_runs_neither_crashes_nor_migrates() -> None:
    # was ZeroDivisionError (here * rt / 0), through FairPolicy.decide too
    assert migrate(slow({"k80": 0.0, "v100": 12_500.0})) == []
    st = ClusterState(NOW, POOLS, [], [slow({"k80": 0.0, "v100": 12_500.0})])
    assert FairPolicy().decide(st) == []


def test_an_infinite_runtime_where_the_job_runs_is_no_reason_to_migrate() -> None:
    # was: here * 12_500 / inf = 0, so the restart cost alone looked like a saving
    assert migrate(slow({"k80": math.inf, "v100": 12_500.0})) == []


def test_never_migrates_to_a_type_it_cannot_run_on() -> None:
    # overdue (expected end before now) with an infinite runtime on the idle type: was a
    # requeue to the v100 (here < 0 made there = -inf)
    assert migrate(slow({"k80": 50_000.0, "v100": math.inf}, end=NOW - 10)) == []


def test_an_overdue_job_is_never_moved_to_a_slower_type() -> None:
    pools = {"k80": GpuPool("k80", 1, 1, 1, 1), "v100": GpuPool("v100", 1, 0, 1, 1)}
    late = RunningJob("1", "a", "u", "v100", 1, NOW - 7200, NOW - 100, preemptible=True,
                      runtime_s={"k80": 50_000.0, "v100": 12_500.0})
    # was a requeue to the k80, 4x slower: a negative time left times 4 looked like a saving
    out = rotation(ClusterState(NOW, pools, [], [late]), [], {}, min_run_s=0, max_per_cycle=8,
                   migrate_margin=0.3, restart_cost_s=300)
    assert out == []


def test_a_finite_saving_still_migrates() -> None:
    assert migrate(slow({"k80": 50_000.0, "v100": 12_500.0})) == [("1", ("v100",))]


def test_an_mps_share_never_triggers_a_requeue() -> None:
    # b (entitled to 2 GPUs, holding none) waits with a 0.5-GPU MPS share while a holds all 4
    # v100s: a whole GPU of a was requeued for it, though step 4 says MPS shares never
    # trigger a requeue
    jobs = [RunningJob(str(i), "a", "u", "v100", 1, NOW - 7200, NOW + 50_000, preemptible=True)
            for i in range(4)]
    share = PendingJob("9", "b", "u", NOW - 60, 1, {"v100": 600.0}, gpu_fraction=0.5)
    other = PendingJob("8", "b", "u", NOW - 60, 2, {"v100": 600.0}, pinned_type="k80")
    st = ClusterState(NOW, {"v100": GpuPool("v100", 4, 0, 1, 4)}, [share, other], jobs)
    assert rotation(st, [share, other], {"9": ("v100",)}, min_run_s=0, max_per_cycle=8) == []
    # the same job asking a whole GPU does take one
    whole = PendingJob("9", "b", "u", NOW - 60, 1, {"v100": 600.0})
    st = ClusterState(NOW, {"v100": GpuPool("v100", 4, 0, 1, 4)}, [whole, other], jobs)
    out = rotation(st, [whole, other], {"9": ("v100",)}, min_run_s=0, max_per_cycle=8)
    assert [d.job_id for d in out] == ["0"]
