"""A job submitted with `--begin` hours ahead on the real local cluster: Slurm's EligibleTime
reaches the daemon, no running job is requeued for it (it is still decided for), and once an
admin moves its begin time to now the next cycle rotates a GPU to it (session 43). Also what
Slurm does on a requeue: the job's EligibleTime is at most the requeue + cred_expire + 1 s,
within the daemon's horizon."""

from __future__ import annotations

import time

import pytest

from slurm_hase.daemon.cycle import OwnedAttrs
from slurm_hase.daemon.records import DEFAULT_BEGIN_HORIZON_S, begins_later
from slurm_hase.policy.registry import make_policy
from slurm_hase.slurm.command_backend import CommandBackend
from slurm_hase.slurm.runner import SubprocessRunner
from slurm_hase.slurm.types import JobState
from tests.integration.test_requeue_live import (
    by_id,
    fill_with_teama,
    rotation_cycle,
    submitted,
    wait_for,
)

pytestmark = pytest.mark.slurm
__all__ = ["submitted"]  # the fixture, shared with test_requeue_live


def test_no_requeue_for_a_job_that_begins_hours_ahead_until_its_begin_is_moved(
        slurm_backend: CommandBackend, slurm_runner: SubprocessRunner,
        submitted: list[str]) -> None:
    holders = fill_with_teama(slurm_backend, submitted)
    later = slurm_backend.submit(["--parsable", "-J", "rot-b", "-A", "teamb", "-p", "gpu",
                                  "--gpus=1", "-t", "30", "--begin=now+2hours",
                                  "--wrap", "sleep 600"])
    submitted.append(later)
    seen = by_id(slurm_backend, [later])[later]
    assert seen.state is JobState.PENDING and seen.eligible_time is not None
    assert 7000 < seen.eligible_time - time.time() <= 7200
    assert begins_later(seen, time.time(), DEFAULT_BEGIN_HORIZON_S) is not None
    policy = make_policy("fair", min_run_s=0.0)
    owned: dict[str, OwnedAttrs] = {}
    res = rotation_cycle(slurm_backend, policy, owned)
    assert res.requeued == [] and not res.errors, (res.requeued, res.errors)
    assert later in res.pending_ids
    # ordered and routed all the same: its Nice and constraint are ready for when it may start
    assert any(d.job_id == later for d in res.decisions), res.decisions
    # the admin starts it now: Slurm's EligibleTime moves, and the next cycle rotates a GPU to it
    slurm_runner.run(["scontrol", "update", f"jobid={later}", "StartTime=now"]).check()
    wait_for(slurm_backend, [later],
             lambda js: begins_later(js[later], time.time(), DEFAULT_BEGIN_HORIZON_S) is None,
             "the begin time did not move", timeout_s=30)
    res = rotation_cycle(slurm_backend, policy, owned)
    assert len(res.requeued) == 1 and res.requeued[0] in holders, (res.requeued, res.skipped)
    back = res.requeued[0]
    requeued = wait_for(slurm_backend, [back], lambda js: js[back].state is JobState.PENDING,
                        "the requeued job did not pend again", timeout_s=30)[back]
    # Slurm 22.05 holds a requeued job for cred_expire (120 s) + 1 s (EligibleTime = the
    # requeue + 121 s); 24.11 showed the requeue's own time (CI's Debian 13 root). Either is
    # well within the horizon, so the daemon keeps planning for it
    assert requeued.eligible_time is not None
    assert requeued.eligible_time - time.time() <= 121
    assert begins_later(requeued, time.time(), DEFAULT_BEGIN_HORIZON_S) is None
    wait_for(slurm_backend, [later], lambda js: js[later].state is JobState.RUNNING,
             "the job did not start on the freed GPU")
