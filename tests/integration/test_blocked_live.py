"""A job that waits on another job (`--dependency`) on the real local cluster: Slurm's reason
reaches the daemon, no running job is requeued for it, and once the dependency is removed the
next cycle rotates a GPU to it (session 42's review finding)."""

from __future__ import annotations

import pytest

from slurm_hase.daemon.cycle import OwnedAttrs
from slurm_hase.daemon.records import waits_on_other
from slurm_hase.policy.registry import make_policy
from slurm_hase.slurm.command_backend import CommandBackend
from slurm_hase.slurm.runner import SubprocessRunner
from slurm_hase.slurm.types import JobState
from tests.integration.test_requeue_live import fill_with_teama, rotation_cycle, submitted, wait_for

pytestmark = pytest.mark.slurm
__all__ = ["submitted"]  # the fixture, shared with test_requeue_live


def test_no_requeue_for_a_job_waiting_on_a_dependency_until_it_is_removed(
        slurm_backend: CommandBackend, slurm_runner: SubprocessRunner,
        submitted: list[str]) -> None:
    holders = fill_with_teama(slurm_backend, submitted)
    waiting = slurm_backend.submit(["--parsable", "-J", "rot-b", "-A", "teamb", "-p", "gpu",
                                    "--gpus=1", "-t", "30", f"--dependency=afterok:{holders[0]}",
                                    "--wrap", "sleep 600"])
    submitted.append(waiting)
    seen = wait_for(slurm_backend, [waiting], lambda js: js[waiting].reason == "Dependency",
                    "Slurm did not show reason Dependency", timeout_s=30)[waiting]
    assert waits_on_other(seen.reason) and seen.state is JobState.PENDING
    policy = make_policy("fair", min_run_s=0.0)
    owned: dict[str, OwnedAttrs] = {}
    res = rotation_cycle(slurm_backend, policy, owned)
    assert res.requeued == [] and not res.errors, (res.requeued, res.errors)
    assert waiting in res.pending_ids and res.pending == 0  # observed, but no record
    # the dependency removed: the job waits for GPUs now, and the next cycle rotates one to it
    slurm_runner.run(["scontrol", "update", f"jobid={waiting}", "Dependency="]).check()
    wait_for(slurm_backend, [waiting], lambda js: not waits_on_other(js[waiting].reason),
             "the reason stayed Dependency", timeout_s=30)
    res = rotation_cycle(slurm_backend, policy, owned)
    assert len(res.requeued) == 1 and res.requeued[0] in holders, (res.requeued, res.skipped)
    wait_for(slurm_backend, [waiting], lambda js: js[waiting].state is JobState.RUNNING,
             "the job did not start on the freed GPU")
