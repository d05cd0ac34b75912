"""The daemon turning a waiting job that opted in (share=yes) into an MPS share, on the real
cluster: on Slurm 24.11 the update lands and the job starts on half a GPU; on 22.05, which would
show the share and allocate the whole GPU, no job is offered for pairing and a share asked
anyway is refused before it reaches scontrol (docs/mps.md, "Pairing waiting jobs")."""

from __future__ import annotations

import time
from collections.abc import Sequence

import pytest

from slurm_hase.daemon.cycle import CycleConfig, JobEstimate, run_cycle
from slurm_hase.daemon.loop import WallClock
from slurm_hase.policy.types import ClusterState, Decision
from slurm_hase.policy.usage import UsageLedger
from slurm_hase.predict.descriptor import WorkloadDescriptor
from slurm_hase.slurm.command_backend import CommandBackend
from slurm_hase.slurm.types import Job

pytestmark = pytest.mark.slurm
CFG = CycleConfig(partitions=("gpu",))


class Described:
    """Runtimes from a table; whether the job may share from its description (share=yes)."""

    def estimate(self, job: Job, gpu_types: Sequence[str]) -> JobEstimate | None:
        if not job.name.startswith("hase-pair"):
            return None  # not this test's job
        desc = WorkloadDescriptor.from_comment(job.comment)
        return JobEstimate({t: 600.0 for t in gpu_types}, mps_slowdown={t: 1.2 for t in gpu_types},
                           may_share=desc is not None and desc.may_share)


class PairOffered:
    """Asks half a GPU for every pending job offered for pairing (`force`: for every one)."""

    name, summary = "pair", "test"

    def __init__(self, force: bool = False) -> None:
        self.force = force
        self.offered: list[str] = []

    def decide(self, state: ClusterState) -> list[Decision]:
        self.offered = [p.job_id for p in state.pending if p.may_share]
        return [Decision(p.job_id, mps_share=50) for p in state.pending
                if p.may_share or self.force]


def submit(backend: CommandBackend, ids: list[str], name: str, desc: WorkloadDescriptor) -> str:
    jid = backend.submit(["--parsable", "-J", name, "-p", "gpu", "--begin=now+3600", "-t", "5",
                          "--gres=gpu:1", "--constraint=t4", f"--comment={desc.to_comment()}",
                          "-o", "/dev/null", "--wrap", "sleep 30"])
    ids.append(jid)
    return jid


def show_job(backend: CommandBackend, jid: str) -> str:
    return backend.runner.run(["scontrol", "show", "job", jid]).check().stdout


def test_an_opted_in_waiting_job_becomes_an_mps_share_only_where_slurm_applies_it(
        slurm_backend: CommandBackend, jobs: list[str]) -> None:
    opted = submit(slurm_backend, jobs, "hase-pair-yes",
                   WorkloadDescriptor(model="resnet50", may_share=True))
    plain = submit(slurm_backend, jobs, "hase-pair-no", WorkloadDescriptor(model="resnet50"))
    policy = PairOffered()
    res = run_cycle(slurm_backend, policy, Described(), WallClock(), UsageLedger(3600.0), {},
                    CFG, owned={})
    if slurm_backend.version_tuple() >= (24, 11):
        assert policy.offered == [opted]
        assert [j for j, _ in res.applied] == [opted], (res.applied, res.skipped)
        assert slurm_backend.job(opted).tres_per_node == "gres/mps:50"
        assert slurm_backend.job(plain).tres_per_node == "gres/gpu:1"
        slurm_backend.runner.run(["scontrol", "update", f"jobid={opted}", "StartTime=now"]).check()
        deadline = time.monotonic() + 60
        while "JobState=RUNNING" not in (text := show_job(slurm_backend, opted)):
            assert time.monotonic() < deadline, text
            time.sleep(0.5)
        assert "gres/mps=50" in text and "gres/gpu" not in text  # half a GPU, not a whole one
    else:
        assert policy.offered == [] and res.applied == []
        # a policy that asks anyway is refused in the plan, with the reason
        forced = run_cycle(slurm_backend, PairOffered(force=True), Described(), WallClock(),
                           UsageLedger(3600.0), {}, CFG, owned={})
        assert forced.applied == []
        assert {j for j, why in forced.skipped if "24.11 or later" in why} == {opted, plain}
        assert "gres:gpu:1" in show_job(slurm_backend, opted)
