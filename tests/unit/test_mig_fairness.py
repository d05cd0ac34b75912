"""Fairness over MIG instances: an instance counts as its part of a physical GPU (1/7 for an
A100's 1g.5gb), in the capacity entitlements share out and in what a running job holds, in the
daemon's policies and in the simulator's metrics alike. Types without MIG count 1 each, so
nothing changes on a fleet without MIG."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from slurm_hase.daemon.cycle import CycleConfig, JobEstimate
from slurm_hase.daemon.fake import gpu_node
from slurm_hase.daemon.state import build_state
from slurm_hase.policy.levels import entitlements
from slurm_hase.policy.types import ClusterState, GpuPool, PendingJob, RunningJob
from slurm_hase.sim.metrics import capacity
from slurm_hase.slurm.types import GpuRequest, Job, JobState

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


# --- a job runs on one MIG instance: CUDA uses one instance per process --------------------

def test_hsbatch_keeps_a_multi_gpu_job_off_mig_instances() -> None:
    from slurm_hase.hsbatch import plan
    from slurm_hase.hsbatch.text import explain_table
    from slurm_hase.predict.descriptor import WorkloadDescriptor

    types = {"a100": (4, True), "a100_1g.5gb": (7, True)}
    memory = {"a100": 40.0, "a100_1g.5gb": 5.0}.get

    def judged(gpus: int) -> list[plan.TypeRow]:
        desc = WorkloadDescriptor(gflops_per_iter=10, params_m=100, num_gpus=gpus)
        return plan.judge_types(types, desc, memory_of=memory, params_m=100,
                                time_limit_s=None, predictions=None)

    one, two = judged(1), judged(2)
    assert [r.candidate for r in one] == [True, True]
    assert plan.choose_constraint(one) == (None, None)  # every type may run it
    assert [(r.gpu_type, r.one_gpu_only, r.candidate) for r in two] == [
        ("a100", False, True), ("a100_1g.5gb", True, False)]
    assert plan.choose_constraint(two) == ("a100", None)
    assert "no: MIG" in explain_table(two, None, "a100", [])


def test_the_daemon_offers_a_multi_gpu_job_no_mig_type() -> None:
    nodes = [gpu_node("a1", "a100"), gpu_node("m1", "a100_1g.5gb", gpus=7)]

    class Everywhere:
        def estimate(self, job: Job, gpu_types: object) -> JobEstimate | None:
            return JobEstimate({"a100": 100.0, "a100_1g.5gb": 600.0})

    def pending(jid: str, count: int) -> Job:
        return Job(job_id=jid, name="j", user="u", account="a", partition="gpu",
                   state=JobState.PENDING, submit_time=0, gpu=GpuRequest(count, None, "job"))

    state = build_state([pending("1", 1), pending("2", 2)], nodes, Everywhere(), {}, {}, 0.0,
                        CycleConfig())
    by_id = {p.job_id: p for p in state.pending}
    assert set(by_id["1"].runtime_s) == {"a100", "a100_1g.5gb"}
    assert set(by_id["2"].runtime_s) == {"a100"}


def test_simulated_mig_instances_have_no_multi_gpu_speed(fixtures_dir: Path) -> None:
    from slurm_hase.predict.modelfile import load_predictor
    from slurm_hase.sim.predicted import predicted_table
    from slurm_hase.sim.throughput import load_throughputs

    table = load_throughputs(fixtures_dir / "sim" / "gavel_throughputs_excerpt.json")
    out = predicted_table(table, ["a100", "a100_1g.5gb"], load_predictor(None))
    assert {sf for _, sf in out.isolated["a100_1g.5gb"]} == {1}
    assert {sf for _, sf in out.isolated["a100"]} == {sf for _, sf in table.isolated["v100"]}
    job_type = next(jt for jt, sf in table.isolated["v100"] if sf > 1)
    assert out.runtimes(job_type, 2, 100.0, ("a100", "a100_1g.5gb"))["a100_1g.5gb"] == math.inf


def test_a_pending_job_that_may_only_use_instances_asks_their_part() -> None:
    """b waits with 7 GPUs' worth of jobs that can only run on 1g.5gb instances: it asks one
    GPU of capacity, not seven, so a (4 whole A100s asked) is entitled the other four."""
    only_mig = [PendingJob(str(i), "b", "u", 0.0, 1, {"a100_1g.5gb": 600.0}) for i in range(7)]
    either = PendingJob("9", "a", "u", 0.0, 4, {"a100": 100.0, "a100_1g.5gb": 600.0})
    ent = entitlements(_state([], ONE_G), [*only_mig, either])
    assert ent == pytest.approx({"b": 1.0, "a": 4.0})
