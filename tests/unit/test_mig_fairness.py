"""Fairness over MIG instances: an instance counts as its part of a physical GPU (1/7 for an
A100's 1g.5gb), in the capacity entitlements share out and in what a running job holds, in the
daemon's policies and in the simulator's metrics alike. Types without MIG count 1 each, so
nothing changes on a fleet without MIG."""

from __future__ import annotations

import pytest

from slurm_hase.daemon.cycle import CycleConfig, JobEstimate
from slurm_hase.daemon.fake import gpu_node
from slurm_hase.daemon.state import build_state
from slurm_hase.policy.levels import entitlements
from slurm_hase.policy.types import ClusterState, GpuPool, PendingJob, RunningJob
from slurm_hase.sim.metrics import capacity
from slurm_hase.slurm.types import Job, JobState

ONE_G = 1 / 7


def _state(running: list[RunningJob], mig_share: float) -> ClusterState:
    pools = {"a100": GpuPool("a100", 4, 0), "a100_1g.5gb": GpuPool("a100_1g.5gb", 7, 0,
                                                                   gpu_share=mig_share)}
    return ClusterState(now=0.0, pools=pools, pending=[], running=running,
                        shares={"a": 1.0, "b": 1.0})


def test_entitlements_count_an_instance_as_its_part_of_the_gpu() -> None:
    """Account a holds the seven 1g.5gb instances (one A100), b all four whole A100s, and b
    asks for four more. Counted as parts, the cluster is 5 GPUs and a holds 1: b may have 4.
    Counted as 11 GPUs (each instance one GPU, as before), a held 7 and was entitled 5.5."""
    running = [RunningJob("1", "a", "u", "a100_1g.5gb", 7, 0.0, 100.0),
               RunningJob("2", "b", "u", "a100", 4, 0.0, 100.0)]
    more = [PendingJob("3", "b", "u", 0.0, 4, {"a100": 100.0})]
    assert entitlements(_state(running, ONE_G), more) == pytest.approx({"a": 1.0, "b": 4.0})
    assert entitlements(_state(running, 1.0), more) == pytest.approx({"a": 5.5, "b": 5.5})


def test_the_daemon_state_gives_a_mig_pool_its_part() -> None:
    nodes = [gpu_node("a1", "a100"), gpu_node("m1", "a100_1g.5gb", gpus=7)]
    job = Job(job_id="9", name="j", user="u", account="a", partition="gpu",
              state=JobState.PENDING)

    class Est:
        def estimate(self, job: Job, gpu_types: object) -> JobEstimate | None:
            return None

    state = build_state([job], nodes, Est(), {}, {}, 0.0, CycleConfig())
    assert state.pools["a100"].gpu_share == 1.0
    assert state.pools["a100_1g.5gb"].gpu_share == pytest.approx(ONE_G)
    assert state.pools["a100_1g.5gb"].total_gpus == 7


def test_simulator_capacity_counts_parts() -> None:
    assert capacity({"a100": 4, "a100_1g.5gb": 28}) == pytest.approx(8.0)
    assert capacity({"k80": 32, "p100": 32, "v100": 32}) == 96.0
