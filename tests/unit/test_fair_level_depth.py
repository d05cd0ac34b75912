"""fair's level_depth: exact Nice levels for the head Slurm can reach, one level behind for the rest."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurm_hase.errors import PolicyError
from slurm_hase.policy.common import NICE_MAX, NICE_STEP, nice_levels
from slurm_hase.policy.fair import FairPolicy
from slurm_hase.policy.types import ClusterState, GpuPool, PendingJob

NOW = 100_000.0
TAIL = NICE_MAX - NICE_STEP


def queue(n: int) -> list[PendingJob]:
    """n jobs of 4 accounts, newest first inside an account (so levels are needed)."""
    return [PendingJob(str(i), f"a{i % 4}", "u", NOW - i, 1, {"v100": 600.0 + 7 * (i % 13)})
            for i in range(n)]


def test_short_head_gets_nice_levels_as_before() -> None:
    jobs = queue(30)
    assert FairPolicy(level_depth=50)._levels(jobs, 0) == nice_levels(jobs, nice_max=TAIL)


def test_jobs_past_level_depth_share_one_level_behind_the_exact_ones() -> None:
    jobs = queue(80)
    out = FairPolicy(level_depth=50)._levels(jobs, 0)
    assert out[:50] == nice_levels(jobs[:50], nice_max=TAIL - NICE_STEP)
    assert max(out[:50]) < TAIL and out[50:] == [TAIL] * 30


def test_a_tail_job_keeps_a_nice_already_behind_the_exact_ones() -> None:
    jobs = queue(80)
    exact_top = max(nice_levels(jobs[:50], nice_max=TAIL - NICE_STEP))
    behind, ahead = exact_top + NICE_STEP, exact_top
    jobs[60] = replace(jobs[60], nice=behind)
    jobs[61] = replace(jobs[61], nice=ahead)  # not behind every exact job: moved to the tail
    out = FairPolicy(level_depth=50)._levels(jobs, 0)
    assert out[60] == behind and out[61] == TAIL


def test_level_depth_never_below_1_2_x_slurms_depth_and_0_is_exact_everywhere() -> None:
    jobs = queue(80)
    assert FairPolicy(level_depth=10)._levels(jobs, 50) == FairPolicy(level_depth=60)._levels(jobs, 0)
    assert FairPolicy(level_depth=0)._levels(jobs, 0) == nice_levels(jobs, nice_max=TAIL)
    with pytest.raises(PolicyError, match="level_depth"):
        FairPolicy(level_depth=-1)


def test_second_cycle_leaves_the_tail_alone() -> None:
    """Applying the decisions, then deciding again on the same queue: no updates at all."""
    pools = {"v100": GpuPool("v100", 4, 0)}
    pol = FairPolicy(level_depth=50, rotate=0.0)
    jobs = queue(120)
    first = {d.job_id: d for d in pol.decide(ClusterState(NOW, pools, jobs, []))}
    applied = [replace(j, nice=first[j.job_id].nice if first.get(j.job_id) and first[j.job_id].nice
                       is not None else j.nice,
                       features="|".join(first[j.job_id].gpu_types or ()) if j.job_id in first
                       else j.features) for j in jobs]
    tail = [d for d in first.values() if d.nice == TAIL]
    assert len(tail) == 70
    assert pol.decide(ClusterState(NOW, pools, applied, [])) == []
