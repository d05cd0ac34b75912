"""Gavel's class LP at hundreds of accounts: classes grouped by account weight, bounded."""

from __future__ import annotations

import random

import numpy as np
import pytest

from slurm_hase.policy.gavel import GavelPolicy, class_lp, job_throughputs
from slurm_hase.policy.lp import max_min_allocation
from slurm_hase.policy.types import ClusterState, GpuPool, PendingJob

TYPES = ["a100", "t4", "v100"]
POOLS = {"a100": GpuPool("a100", 8, 0), "t4": GpuPool("t4", 8, 0), "v100": GpuPool("v100", 8, 0)}
CAP = np.array([8.0, 8.0, 8.0])
# two job kinds: one gains 4x on a100 over t4, one barely cares
KINDS = [{"a100": 100.0, "v100": 200.0, "t4": 400.0}, {"a100": 100.0, "v100": 110.0, "t4": 120.0}]


def jobs_of(accounts: int, per_account: int = 2) -> list[PendingJob]:
    out = []
    for a in range(accounts):
        for i in range(per_account):
            out.append(PendingJob(f"{a}.{i}", f"acct{a}", "u", float(a), 1, KINDS[i % 2]))
    return out


def rows(jobs: list[PendingJob]) -> list[tuple[PendingJob, list[float]]]:
    return [(j, job_throughputs(j, TYPES, TYPES)) for j in jobs]


def weights(jobs: list[PendingJob], shares: dict[str, float]) -> dict[str, float]:
    per: dict[str, int] = {}
    for j in jobs:
        per[j.account] = per.get(j.account, 0) + 1
    return {a: shares.get(a, 1.0) / n for a, n in per.items()}


def test_hundreds_of_accounts_fit_max_classes_and_every_job_is_decided() -> None:
    rng = random.Random(0)
    jobs = [PendingJob(str(i), f"acct{rng.randrange(400)}", "u", float(i), rng.choice([1, 2, 4]),
                       {t: 100.0 * rng.uniform(1, 4) for t in TYPES}) for i in range(3000)]
    shares = {f"acct{a}": float(1 + a % 5) for a in range(400)}
    policy = GavelPolicy()
    classes, by_weight = policy._fitting_classes(rows(jobs), weights(jobs, shares))
    assert by_weight and len(classes) <= policy.max_classes
    assert sum(len(m) for m in classes.values()) == len(jobs)
    out = policy.decide(ClusterState(0.0, POOLS, jobs, [], shares=shares))
    assert {d.job_id for d in out} == {j.job_id for j in jobs}
    assert all(d.gpu_types for d in out)


def test_a_few_accounts_keep_one_class_each() -> None:
    jobs = jobs_of(5)
    classes, by_weight = GavelPolicy()._fitting_classes(rows(jobs), weights(jobs, {}))
    assert not by_weight
    assert {k[0] for k in classes} == {f"acct{a}" for a in range(5)}


def test_equal_weights_grouped_give_the_per_account_optimum() -> None:
    # 70 accounts x 2 kinds = 140 classes by account (> 120): grouped by weight, all accounts
    # weigh the same, so the grouped LP is the per-account one with identical classes merged
    jobs = jobs_of(70)
    policy = GavelPolicy()
    w = weights(jobs, {})
    grouped, by_weight = policy._fitting_classes(rows(jobs), w)
    assert by_weight and len(grouped) == 2
    exact = policy._classes(rows(jobs), 0.25)
    assert len(exact) == 140
    _, t_grouped = max_min_allocation(*class_lp(sorted(grouped), grouped, w, True, CAP))
    _, t_exact = max_min_allocation(*class_lp(sorted(exact), exact, w, False, CAP))
    assert t_grouped == pytest.approx(t_exact, rel=1e-9)


def test_unequal_weights_are_not_grouped_while_their_buckets_fit() -> None:
    # 130 accounts: 65 at share 1, 65 at share 8 (3 log2 steps apart): two weight buckets
    jobs = jobs_of(130, per_account=1)
    shares = {f"acct{a}": (1.0 if a % 2 else 8.0) for a in range(130)}
    classes, by_weight = GavelPolicy()._fitting_classes(rows(jobs), weights(jobs, shares))
    assert by_weight
    groups = {k[0] for k in classes}
    assert len(groups) == 2
    for members in classes.values():
        assert len({shares[j.account] for j, _ in members}) == 1


def test_a_grouped_class_orders_its_jobs_by_each_accounts_usage() -> None:
    # three accounts of equal weight, one class when grouped; c is the least served, b the most
    jobs = [PendingJob(a, a, "u", 0.0, 1, KINDS[0]) for a in ("a", "b", "c")]
    policy = GavelPolicy(max_classes=2)
    state = ClusterState(0.0, POOLS, jobs, [], usage={"a": 5.0, "b": 10.0, "c": 0.0})
    out = {d.job_id: d for d in policy.decide(state)}
    nice = {k: d.nice or 0 for k, d in out.items()}
    assert nice["c"] < nice["a"] < nice["b"]
    assert len({d.gpu_types for d in out.values()}) == 1  # one class, one allocation row
