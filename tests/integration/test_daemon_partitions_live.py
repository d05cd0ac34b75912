"""The daemon against the real local cluster when a job is outside its partitions: what it set
on a job moved out (or in a partition the config dropped) is put back, at once for a pending
job, and when Slurm requeues it for a running one."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from slurm_hase.daemon.cycle import OwnedAttrs, run_cycle
from slurm_hase.daemon.loop import WallClock
from slurm_hase.policy.common import NICE_MAX
from slurm_hase.policy.registry import make_policy
from slurm_hase.policy.usage import UsageLedger
from slurm_hase.slurm.command_backend import CommandBackend
from slurm_hase.slurm.runner import SubprocessRunner
from tests.integration.test_daemon_live import (
    CFG,
    Table,
    release_and_wait,
    squeue,
    submit,
    submitted,
)

pytestmark = pytest.mark.slurm
__all__ = ["submitted"]  # the fixture, used by name


def test_job_moved_out_of_the_managed_partition_gets_its_attributes_back(
        slurm_backend: CommandBackend, slurm_runner: SubprocessRunner,
        submitted: list[str]) -> None:
    """fair sets Nice and a type constraint on two gpu-partition jobs; one is then moved to
    debug with scontrol. The next cycle puts back what it set there (Nice 0, no Features), as
    reset would, and leaves the other job's alone."""
    jobs = [submit(slurm_backend, submitted, f"hase-m{i}", "--gpus=1", "-A", "teama")
            for i in range(2)]
    cfg = replace(CFG, nice_scale=1100, nice_zero=NICE_MAX)
    owned: dict[str, OwnedAttrs] = {}
    fair = make_policy("fair")
    res = run_cycle(slurm_backend, fair, Table(), WallClock(), UsageLedger(3600.0), {}, cfg,
                    owned=owned)
    assert res.errors == [] and set(jobs) <= set(owned)
    before = squeue(slurm_runner, jobs)
    assert all(before[j][1] and before[j][2] != "0" for j in jobs), before
    slurm_runner.run(["scontrol", "update", f"jobid={jobs[0]}", "Partition=debug"]).check()
    res = run_cycle(slurm_backend, fair, Table(), WallClock(), UsageLedger(3600.0), {}, cfg,
                    owned=owned)
    assert res.errors == [] and jobs[0] in {j for j, _ in res.applied}
    assert jobs[0] not in res.left_ids and jobs[0] not in res.pending_ids
    reason = {d.job_id: d.reason for d in res.decisions}[jobs[0]]
    assert reason.startswith("left the managed partitions (now in debug)")
    after = squeue(slurm_runner, jobs)
    assert after[jobs[0]][1:3] == ["", "0"], after  # Features, Nice
    assert after[jobs[1]][1] == before[jobs[1]][1] and after[jobs[1]][2] != "0"


def test_running_job_outside_the_managed_partitions_gets_its_attributes_back_when_requeued(
        slurm_backend: CommandBackend, slurm_runner: SubprocessRunner,
        submitted: list[str]) -> None:
    """fair sets Nice and a type constraint on a gpu-partition job, which then starts; the
    config is reloaded to manage debug only. While the job runs outside the managed partitions
    the daemon keeps it as its own (left_ids) and changes nothing on it; once Slurm requeues it,
    the next cycle puts back Nice 0 and no Features."""
    (jid,) = [submit(slurm_backend, submitted, "hase-r0", "--gpus=1", "-A", "teama",
                     "--requeue")]
    cfg = replace(CFG, nice_scale=1100, nice_zero=NICE_MAX)
    owned: dict[str, OwnedAttrs] = {}
    fair = make_policy("fair")
    res = run_cycle(slurm_backend, fair, Table(), WallClock(), UsageLedger(3600.0), {}, cfg,
                    owned=owned)
    assert res.errors == [] and jid in owned
    set_by_us = squeue(slurm_runner, [jid])[jid]
    assert set_by_us[1] and set_by_us[2] != "0", set_by_us
    release_and_wait(slurm_runner, [jid], 1)
    reloaded = replace(cfg, partitions=("debug",))
    res = run_cycle(slurm_backend, fair, Table(), WallClock(), UsageLedger(3600.0), {},
                    reloaded, owned=owned)
    assert res.errors == [] and res.applied == [] and jid in res.left_ids
    slurm_runner.run(["scontrol", "requeue", jid]).check()
    deadline = time.time() + 60
    while squeue(slurm_runner, [jid])[jid][0] != "PENDING":
        assert time.time() < deadline, squeue(slurm_runner, [jid])
        time.sleep(0.5)
    res = run_cycle(slurm_backend, fair, Table(), WallClock(), UsageLedger(3600.0), {},
                    reloaded, owned=owned)
    assert res.errors == [] and jid in {j for j, _ in res.applied}
    assert jid not in res.left_ids
    assert squeue(slurm_runner, [jid])[jid][1:3] == ["", "0"]  # Features, Nice
