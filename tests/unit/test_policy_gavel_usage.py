"""Gavel's round priority on usage a damaged ledger may hold: negative, NaN or inf."""

from __future__ import annotations

import math

import pytest

from slurm_hase.policy.gavel import GavelPolicy
from slurm_hase.policy.types import ClusterState, GpuPool, PendingJob

POOLS = {"a100": GpuPool("a100", 4, 0), "v100": GpuPool("v100", 4, 0)}
# b's job is older: on equal priority it would go first
JOBS = [PendingJob("1", "a", "u", 5.0, 1, {"a100": 100.0, "v100": 200.0}),
        PendingJob("2", "b", "u", 0.0, 1, {"a100": 100.0, "v100": 200.0})]


def nices(usage: dict[str, float]) -> dict[str, int]:
    out = GavelPolicy().decide(ClusterState(10.0, POOLS, JOBS, [], usage=usage))
    return {d.job_id: d.nice or 0 for d in out}


def test_negative_usage_counts_as_none() -> None:
    # a at -1 and b at 3: a's rounds were -1, so 1 / (1 + rounds) raised ZeroDivisionError
    assert nices({"a": -1.0, "b": 3.0}) == nices({"a": 0.0, "b": 3.0})


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_one_non_finite_usage_does_not_hide_the_others(bad: float) -> None:
    # an account c with no job at NaN or inf made the mean usage NaN or inf: every account's
    # rounds 0 (or NaN), so b, served 3, went first by age
    out = nices({"a": 0.0, "b": 3.0, "c": bad})
    assert out == nices({"a": 0.0, "b": 3.0, "c": 0.0})
    assert out["1"] < out["2"]
