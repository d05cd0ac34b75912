"""fair's `sfq` knob: 0 drops start-time fair queueing between accounts for one shortest-first
order over all of them, with fairness from `floor` alone."""

from __future__ import annotations

import pytest

from slurm_hase.errors import PolicyError
from slurm_hase.policy.fair import FairPolicy
from slurm_hase.policy.order import shortest_first
from slurm_hase.policy.types import ClusterState, GpuPool, PendingJob, RunningJob
from tests.unit.test_fair_order import NOW, random_queue


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("age_tau_s", [0.0, 7200.0])
def test_shortest_first_is_the_sort_by_aged_size_submit_and_id(seed: int,
                                                               age_tau_s: float) -> None:
    jobs, best, _ = random_queue(seed)

    def key(q: PendingJob) -> tuple[float, float, str]:
        size = q.num_gpus * q.gpu_fraction * best[q.job_id]
        if age_tau_s > 0:
            size /= 1.0 + max(0.0, NOW - q.submit_time) / age_tau_s
        return (size, q.submit_time, q.job_id)

    got = shortest_first(jobs, [best[j.job_id] for j in jobs], NOW, age_tau_s)
    assert [j.job_id for j in got] == [j.job_id for j in sorted(jobs, key=key)]
    assert shortest_first([], [], NOW, age_tau_s) == []


def _state(usage: dict[str, float], running: list[RunningJob]) -> ClusterState:
    # a used 2 GPU-days and runs 1 of the 2 GPUs; b has a long job, c a short one
    pend = [PendingJob("1", "b", "u", NOW - 60.0, 1, {"v100": 36_000.0}),
            PendingJob("2", "a", "u", NOW - 60.0, 1, {"v100": 600.0})]
    return ClusterState(NOW, {"v100": GpuPool("v100", 2, 1)}, pend, running, usage=usage)


def _first(policy: FairPolicy, state: ClusterState) -> str:
    nice = {d.job_id: d.nice for d in policy.decide(state)}
    return min(nice, key=lambda j: (nice[j] if nice[j] is not None else 0, j))


def test_sfq_off_puts_the_shortest_job_first_whoever_used_more() -> None:
    running = [RunningJob("r", "a", "u", "v100", 1, NOW - 600.0, NOW + 600.0)]
    st = _state({"a": 2 * 86400.0}, running)
    assert _first(FairPolicy(rotate=0.0), st) == "1"  # SFQ: b has used nothing, a a lot
    assert _first(FairPolicy(rotate=0.0, sfq=0.0), st) == "2"  # one order: 600 s < 36,000 s


def test_sfq_off_with_a_floor_serves_the_account_below_it_first() -> None:
    # b holds nothing while its job waits: level 0 < floor, so it goes first again
    running = [RunningJob("r", "a", "u", "v100", 1, NOW - 600.0, NOW + 600.0)]
    st = _state({"a": 2 * 86400.0}, running)
    assert _first(FairPolicy(rotate=0.0, sfq=0.0, floor=0.6), st) == "1"


def test_sfq_knob_is_checked() -> None:
    with pytest.raises(PolicyError, match="sfq"):
        FairPolicy(sfq=2.0)
