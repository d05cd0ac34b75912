"""HASE's load penalty: a GPU type with no GPUs does not enter the mean load."""

from __future__ import annotations

from slurm_hase.policy.hase import HasePolicy
from slurm_hase.policy.types import ClusterState, GpuPool, PendingJob, RunningJob

NOW = 1000.0
# a100: all 4 busy until NOW + 100 (load 1); v100: 2 of 4 busy for long (load 0.5)
RUNNING = ([RunningJob(f"r{i}", "x", "u", "a100", 1, 0.0, NOW + 100) for i in range(4)]
           + [RunningJob(f"s{i}", "x", "u", "v100", 1, 0.0, NOW + 5000) for i in range(2)])
JOB = PendingJob("1", "a", "u", NOW, 1, {"a100": 100.0, "v100": 300.0})
POOLS = {"a100": GpuPool("a100", 4, 0), "v100": GpuPool("v100", 4, 2)}


def routed(pools: dict[str, GpuPool]) -> tuple[str, ...] | None:
    (d,) = HasePolicy().decide(ClusterState(NOW, pools, [JOB], RUNNING))
    return d.gpu_types


def test_an_empty_pool_leaves_the_choice_unchanged() -> None:
    # a100: 200 s x (1 + 0.8 x (1 / 0.75 - 1)) = 253 s beats the v100's 300 s. A k80 pool of
    # 0 GPUs entered the mean at load 0 (mean 0.5): the a100 became 360 s and lost
    assert routed(POOLS) == ("a100",)
    assert routed({**POOLS, "k80": GpuPool("k80", 0, 0)}) == ("a100",)
