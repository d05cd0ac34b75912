"""fair's account levels: level-first type routing and the instantaneous floor (policy/levels.py)."""

from __future__ import annotations

import pytest

from slurm_hase.errors import PolicyError
from slurm_hase.policy.fair import FairPolicy
from slurm_hase.policy.levels import account_levels, floor_first, level
from slurm_hase.policy.types import ClusterState, Decision, GpuPool, PendingJob, RunningJob

NOW = 10_000.0


def pend(jid: str, acct: str, rt: dict[str, float] | None = None) -> PendingJob:
    return PendingJob(jid, acct, "u", NOW - 100 + int(jid), 1, rt or {"v100": 600.0})


def running(jid: str, acct: str, gpu_type: str = "v100", speed: float = 1.0,
            left: float = 50_000.0) -> RunningJob:
    return RunningJob(jid, acct, "u", gpu_type, 1, NOW - 600, NOW + left, relative_speed=speed)


def test_levels_are_service_over_demand_capped_entitlement() -> None:
    pools = {"v100": GpuPool("v100", 4, 1)}
    pending = [pend("1", "a"), pend("2", "b"), pend("3", "b")]
    st = ClusterState(NOW, pools, pending, [running("7", "a"), running("8", "a", speed=0.5),
                                            running("9", "a")])
    held, ent = account_levels(st, pending)
    # demand a = 3 held + 1 asked, b = 2 asked: 4 GPUs split 2 / 2
    assert held == {"a": 2.5} and ent == {"a": 2.0, "b": 2.0}
    assert level(held, ent, "a") == 1.25 and level(held, ent, "b") == 0.0
    assert level(held, ent, "nobody") == float("inf")


def test_floor_first_moves_jobs_of_accounts_below_the_floor_lowest_level_first() -> None:
    order = [pend("1", "a"), pend("2", "b"), pend("3", "b"), pend("4", "c")]
    levels = ({"a": 3.0, "b": 0.0, "c": 1.0}, {"a": 2.0, "b": 2.0, "c": 2.0})  # 1.5, 0, 0.5
    ids = [[j.job_id for j in floor_first(order, levels, f)] for f in (0.0, 0.5, 1.0)]
    assert ids[0] == ["1", "2", "3", "4"]  # off: unchanged
    assert ids[1] == ["2", "1", "3", "4"]  # b (0) lifted to 0.5 by one job; c is at 0.5
    assert ids[2] == ["2", "3", "4", "1"]  # b at 0, then b and c at 0.5; a (1.5) stays behind


def slurm_order(decisions: list[Decision], pending: list[PendingJob]) -> list[str]:
    nice = {d.job_id: d.nice for d in decisions if d.nice is not None}
    return [j.job_id for j in sorted(pending, key=lambda j: (nice.get(j.job_id, j.nice),
                                                             j.submit_time, j.job_id))]


def test_floor_puts_an_account_with_no_service_now_ahead_of_the_cumulative_order() -> None:
    pools = {"v100": GpuPool("v100", 2, 1)}
    pending = [pend("1", "a"), pend("2", "b")]
    # b used a lot in the past (SFQ puts it last) but holds nothing now (level 0)
    st = ClusterState(NOW, pools, pending, [running("9", "a")], usage={"b": 1e9})
    assert slurm_order(FairPolicy(theta=0.0).decide(st), pending) == ["1", "2"]
    assert slurm_order(FairPolicy(theta=0.0, floor=0.5).decide(st), pending) == ["2", "1"]


def test_route_by_level_gives_the_free_fast_gpu_to_the_least_served_account() -> None:
    pools = {"a100": GpuPool("a100", 2, 1), "t4": GpuPool("t4", 2, 1)}
    rich = pend("1", "rich", {"a100": 100.0, "t4": 400.0})  # gains most from a100 (regret)
    poor = pend("2", "poor", {"a100": 100.0, "t4": 150.0})
    run = [running("8", "rich", "a100"), running("9", "other", "t4")]
    st = ClusterState(NOW, pools, [rich, poor], run)

    def types(**kw: float) -> dict[str, tuple[str, ...] | None]:
        return {d.job_id: d.gpu_types for d in FairPolicy(theta=0.0, **kw).decide(st)}

    assert types(route_by_level=0.0) == {"1": ("a100",), "2": ("t4",)}  # largest regret first
    assert types()["2"] == ("a100",)  # default: poor (level 0) picks first


def test_level_knobs_are_checked() -> None:
    with pytest.raises(PolicyError):
        FairPolicy(floor=1.5)
    with pytest.raises(PolicyError):
        FairPolicy(route_by_level=-1.0)
