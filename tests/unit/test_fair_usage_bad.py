"""fair's order on usage a damaged ledger may hold: NaN, inf or negative count as none."""

from __future__ import annotations

import math

import pytest

from slurm_hase.policy.fair import FairPolicy
from slurm_hase.policy.order import fair_order
from slurm_hase.policy.types import ClusterState, GpuPool, PendingJob

JOBS = [PendingJob("1", "a", "u", 0.0, 1, {"v100": 100.0}),
        PendingJob("2", "a", "u", 0.0, 1, {"v100": 100.0}),
        PendingJob("3", "b", "u", 0.0, 1, {"v100": 100.0})]


def ids(usage: dict[str, float]) -> list[str]:
    return [j.job_id for j in fair_order(JOBS, [100.0] * 3, {}, usage, [], 10.0, 0.0)]


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_non_finite_usage_orders_as_no_usage(bad: float) -> None:
    # NaN made every tag of a's jobs NaN: a went behind b whatever b had received
    assert ids({"a": bad, "b": 150.0}) == ids({"a": 0.0, "b": 150.0}) == ["1", "2", "3"]


def test_negative_usage_gives_no_head_start() -> None:
    # -150 put both of a's jobs before b's, as if b had been served while a had not
    assert ids({"a": -150.0, "b": 0.0}) == ids({"a": 0.0, "b": 0.0}) == ["1", "3", "2"]


def test_fair_policy_puts_the_nan_account_in_its_place() -> None:
    pools = {"v100": GpuPool("v100", 1, 0)}
    out = FairPolicy().decide(ClusterState(10.0, pools, JOBS, [], usage={"a": math.nan,
                                                                          "b": 150.0}))
    nice = {d.job_id: d.nice or 0 for d in out}
    assert nice["1"] < nice["3"]
