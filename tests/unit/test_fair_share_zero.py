"""fair's order with an account of share 0 (Slurm's Fairshare=0: entitled to nothing)."""

from __future__ import annotations

from slurm_hase.policy.fair import FairPolicy
from slurm_hase.policy.order import fair_order
from slurm_hase.policy.types import ClusterState, GpuPool, PendingJob

JOBS = [PendingJob("1", "a", "u", 0.0, 1, {"v100": 100.0}),
        PendingJob("2", "b", "u", 0.0, 1, {"v100": 100.0}),
        PendingJob("3", "a", "u", 0.0, 1, {"v100": 100.0}),
        PendingJob("4", "z", "u", 0.0, 1, {"v100": 100.0})]


def ids(shares: dict[str, float], usage: dict[str, float]) -> list[str]:
    return [j.job_id for j in fair_order(JOBS, [100.0] * 4, shares, usage, [], 10.0, 0.0)]


def test_a_share_zero_account_goes_behind_every_account_with_a_share() -> None:
    # a's first job had tag 0 / 1e-12 = 0, level with fresh accounts and ahead of b and z
    # once they had any usage
    assert ids({"a": 0.0}, {"b": 50.0, "z": 80.0}) == ["2", "4", "1", "3"]
    assert ids({"a": 0.0}, {}) == ["2", "4", "1", "3"]


def test_share_zero_accounts_interleave_among_themselves() -> None:
    assert ids({"a": 0.0, "z": 0.0}, {}) == ["2", "1", "4", "3"]


def test_fair_policy_gives_the_share_zero_account_the_later_nice() -> None:
    pools = {"v100": GpuPool("v100", 1, 0)}
    jobs = JOBS[:2]
    out = FairPolicy().decide(ClusterState(10.0, pools, jobs, [], shares={"a": 0.0},
                                           usage={"b": 50.0}))
    nice = {d.job_id: d.nice or 0 for d in out}
    assert nice["2"] < nice["1"]
