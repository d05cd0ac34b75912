"""Properties of hase, fair and gavel, and the numpy LP solver."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from slurm_hase.errors import PolicyError
from slurm_hase.policy.common import NICE_MAX
from slurm_hase.policy.fair import FairPolicy
from slurm_hase.policy.gavel import GavelPolicy
from slurm_hase.policy.hase import HasePolicy, load_penalty
from slurm_hase.policy.lp import max_min_allocation, solve_lp
from slurm_hase.policy.types import ClusterState, Decision, GpuPool, PendingJob, RunningJob


def job(jid: str, acct: str = "a", submit: float = 0.0, rt: dict[str, float] | None = None,
        **kw: object) -> PendingJob:
    return PendingJob(jid, acct, "u", submit, 1, rt or {"a100": 100.0, "t4": 300.0}, **kw)  # type: ignore[arg-type]


def slurm_order(decisions: list[Decision], pend: list[PendingJob]) -> list[str]:
    """Order Slurm would run pend in after applying nice (nice, then age)."""
    nice = {d.job_id: d.nice for d in decisions if d.nice is not None}
    return [j.job_id for j in sorted(pend, key=lambda j: (nice.get(j.job_id, j.nice),
                                                           j.submit_time, j.job_id))]


def pools(a100: int = 1, t4: int = 1, free: bool = True) -> dict[str, GpuPool]:
    return {"a100": GpuPool("a100", a100, a100 if free else 0),
            "t4": GpuPool("t4", t4, t4 if free else 0)}


def test_load_penalty_formula() -> None:
    assert load_penalty(100.0, 1.0, 0.5, 0.8) == pytest.approx(180.0)
    assert load_penalty(100.0, 0.2, 0.5, 0.8) == 100.0
    assert load_penalty(100.0, 0.9, 0.0, 0.8) == 100.0


def test_hase_picks_smallest_completion_including_wait() -> None:
    # a100 is 3x faster but busy for 1000 s; t4 is idle -> t4 finishes first (300 < 1100)
    run = [RunningJob("r", "b", "u", "a100", 1, 0.0, 1000.0)]
    st = ClusterState(0.0, {"a100": GpuPool("a100", 1, 0), "t4": GpuPool("t4", 1, 1)},
                      [job("1")], run)
    [d] = HasePolicy(beta=0.0).decide(st)
    assert d.gpu_types == ("t4",) and d.nice is None
    # with the a100 free, it wins
    st2 = ClusterState(0.0, pools(), [job("1")], [])
    assert HasePolicy(beta=0.0).decide(st2)[0].gpu_types == ("a100",)


def test_hase_reserves_capacity_for_later_jobs() -> None:
    st = ClusterState(0.0, pools(), [job("1", submit=1.0), job("2", submit=2.0)], [])
    ds = {d.job_id: d.gpu_types for d in HasePolicy(beta=0.0).decide(st)}
    assert ds == {"1": ("a100",), "2": ("a100",)}  # a100 after job 1: 100 + 100 < 300 on t4
    # with t4 at 150, waiting for the a100 job 1 reserved (200) loses: t4
    st3 = ClusterState(0.0, pools(), [job("1", submit=1.0),
                                      job("2", submit=2.0, rt={"a100": 100.0, "t4": 150.0})], [])
    ds3 = {d.job_id: d.gpu_types for d in HasePolicy(beta=0.0).decide(st3)}
    assert ds3["2"] == ("t4",)


def test_hase_uses_mps_for_shares() -> None:
    run = [RunningJob("r", "b", "u", "a100", 1, 0.0, 5000.0, gpu_fraction=0.5)]
    share = job("1", gpu_fraction=0.5, mps_slowdown={"a100": 1.2})
    st = ClusterState(0.0, {"a100": GpuPool("a100", 1, 0), "t4": GpuPool("t4", 1, 0)},
                      [share], run + [RunningJob("q", "b", "u", "t4", 1, 0.0, 50.0)])
    assert HasePolicy(beta=0.0).decide(st)[0].gpu_types == ("a100",)  # 120 s via MPS


def test_pinned_jobs_untouched() -> None:
    pinned = job("1", pinned_type="t4")
    st = ClusterState(0.0, pools(), [pinned, job("2", submit=1.0)], [])
    for pol in (HasePolicy(), FairPolicy(), GavelPolicy()):
        got = {d.job_id: d for d in pol.decide(st)}
        assert got["2"].gpu_types is not None, pol.name  # the unpinned job is routed
        if pol.name == "hase":
            assert "1" not in got  # hase only routes: nothing for a job that asked for a type
        else:  # ordered with the others (a Nice), never re-typed
            assert got["1"].gpu_types is None and got["1"].nice is not None, pol.name


def test_fair_gives_underserved_account_lower_nice() -> None:
    pend = [job("1", "rich", 0.0), job("2", "poor", 5.0), job("3", "rich", 1.0)]
    st = ClusterState(0.0, pools(), pend, [], usage={"rich": 1e6, "poor": 0.0})
    ds = FairPolicy(theta=0.0).decide(st)
    assert slurm_order(ds, pend) == ["2", "1", "3"]
    nice = {d.job_id: d.nice for d in ds}
    assert (nice.get("2") or 0) < (nice["1"] or 0)


def test_fair_shares_weight_entitlement() -> None:
    pend = [job("1", "big", 0.0), job("2", "small", 5.0)]
    st = ClusterState(0.0, pools(), pend, [], shares={"big": 10.0, "small": 1.0},
                      usage={"big": 5000.0, "small": 1000.0})
    assert slurm_order(FairPolicy(theta=0.0).decide(st), pend) == ["1", "2"]
    # without the shares the big account is the more served one
    st1 = ClusterState(0.0, pools(), pend, [], usage=st.usage)
    assert slurm_order(FairPolicy(theta=0.0).decide(st1), pend) == ["2", "1"]


def test_fair_theta_zero_strict_order_by_deficit() -> None:
    usage = {"a": 300.0, "b": 100.0, "c": 200.0}
    pend = [job(str(i), acct, float(i)) for i, acct in enumerate("acb")]  # age: a, c, b
    st = ClusterState(0.0, pools(a100=3, t4=3), pend, [], usage=usage)
    ds = FairPolicy(theta=0.0).decide(st)
    nice = {d.job_id: d.nice for d in ds}
    assert 0 < (nice["2"] or 0) < (nice["1"] or 0) < (nice["0"] or 0)  # b, then c, then a
    assert slurm_order(ds, pend) == ["2", "1", "0"]


def test_fair_routes_biggest_gainer_to_a100() -> None:
    small = job("1", submit=0.0, rt={"a100": 100.0, "t4": 150.0})  # ratio 1.5
    big = job("2", submit=1.0, rt={"a100": 100.0, "t4": 400.0})  # ratio 4
    st = ClusterState(0.0, pools(), [small, big], [])
    types = {d.job_id: d.gpu_types for d in FairPolicy(theta=0.0, tolerance=0.0).decide(st)}
    assert types["2"] == ("a100",) and types["1"] == ("t4",)


def test_fair_shortest_first_inside_account_not_across() -> None:
    # one account: the short job overtakes the older long one
    long_, short = job("1", "a", 0.0, rt={"a100": 900.0, "t4": 2700.0}), job("2", "a", 1.0)
    st = ClusterState(0.0, pools(a100=2, t4=2), [long_, short], [])
    assert slurm_order(FairPolicy(theta=0.0).decide(st), [long_, short]) == ["2", "1"]
    # across accounts the deficit decides, not size: the poor account's long job goes first
    poor_long = job("3", "poor", 5.0, rt={"a100": 900.0, "t4": 2700.0})
    st2 = ClusterState(0.0, pools(a100=2, t4=2), [short, poor_long], [],
                       usage={"a": 1e6, "poor": 0.0})
    assert slurm_order(FairPolicy(theta=0.0).decide(st2), [short, poor_long]) == ["3", "2"]


def test_fair_age_credit_bounds_starvation() -> None:
    now = 10 * 86400.0
    old_long = job("1", "a", 0.0, rt={"a100": 3000.0, "t4": 9000.0})
    fresh_short = job("2", "a", now, rt={"a100": 600.0, "t4": 1800.0})
    st = ClusterState(now, pools(a100=2, t4=2), [old_long, fresh_short], [])
    pure = FairPolicy(theta=0.0, age_tau_s=0.0).decide(st)  # pure size order
    assert slurm_order(pure, [old_long, fresh_short]) == ["2", "1"]
    aged = FairPolicy(theta=0.0, age_tau_s=86400.0).decide(st)  # 3000 / 11 < 600
    assert slurm_order(aged, [old_long, fresh_short]) == ["1", "2"]
    # the default credit (2 h): a 10-day wait divides the key by 121
    assert slurm_order(FairPolicy(theta=0.0).decide(st), [old_long, fresh_short]) == ["1", "2"]


def test_fair_routes_by_completion_including_wait() -> None:
    # a100 busy for 1000 s, t4 idle: t4 (300) completes before a100 (1000 + 100)
    run = [RunningJob("r", "b", "u", "a100", 1, 0.0, 1000.0)]
    st = ClusterState(0.0, {"a100": GpuPool("a100", 1, 0), "t4": GpuPool("t4", 1, 1)},
                      [job("1")], run)
    [d] = FairPolicy(theta=0.0).decide(st)
    assert d.gpu_types == ("t4",)
    # tolerance admits the near-equivalent type too
    st2 = ClusterState(0.0, pools(), [job("1", rt={"a100": 100.0, "t4": 105.0})], [])
    assert FairPolicy(tolerance=0.1).decide(st2)[0].gpu_types == ("a100", "t4")
    assert FairPolicy(tolerance=0.0).decide(st2)[0].gpu_types == ("a100",)


def test_no_decision_when_nothing_changes_and_deterministic() -> None:
    pend = [job("1", "x", 0.0), job("2", "y", 1.0, rt={"a100": 100.0, "t4": 400.0})]
    st = ClusterState(0.0, pools(), pend, [], usage={"x": 10.0})
    for pol in (HasePolicy(), FairPolicy(), GavelPolicy()):
        first = pol.decide(st)
        assert first == pol.decide(st)
        by_id = {d.job_id: d for d in first}
        applied = [replace(j, **{
                                  "nice": by_id[j.job_id].nice if j.job_id in by_id and by_id[j.job_id].nice is not None else j.nice,
                                  "features": "|".join(by_id[j.job_id].gpu_types or ()) if j.job_id in by_id and by_id[j.job_id].gpu_types else j.features})
                   for j in pend]
        st2 = ClusterState(0.0, st.pools, applied, [], usage=st.usage)
        assert pol.decide(st2) == [], pol.name


def test_never_empty_or_unknown_types() -> None:
    pend = [job("1", rt={"a100": 10.0, "h100": 5.0}), job("2", rt={"h100": 5.0})]
    st = ClusterState(0.0, pools(), pend, [])
    for pol in (HasePolicy(), FairPolicy(), GavelPolicy()):
        decisions = pol.decide(st)
        assert any(d.gpu_types for d in decisions), pol.name  # job 1 is routed
        for d in decisions:
            assert d.job_id == "1"
            assert d.gpu_types is None or (d.gpu_types and set(d.gpu_types) <= {"a100", "t4"})


def test_lp_textbook_optimum() -> None:
    r = solve_lp(np.array([3.0, 5.0]), np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 2.0]]),
                 np.array([4.0, 12.0, 18.0]))
    assert r.objective == pytest.approx(36.0)
    assert r.x == pytest.approx([2.0, 6.0])


def test_gavel_lp_two_jobs_two_types_hand_optimum() -> None:
    # job0: 2 on A, 1 on B; job1: 3 on A, 1 on B; one GPU each type.
    # All constraints tight: a0 + a1 = 1, b0 = a1, b1 = a0 -> job0 = 1 + a0, job1 = 3 - 2 a0,
    # equal at a0 = 2/3: t = 5/3, X = [[2/3, 1/3], [1/3, 2/3]] (unique).
    x, t = max_min_allocation(np.array([[2.0, 1.0], [3.0, 1.0]]), np.ones(2), np.ones(2),
                              np.ones(2))
    assert t == pytest.approx(5.0 / 3.0)
    assert x == pytest.approx(np.array([[2 / 3, 1 / 3], [1 / 3, 2 / 3]]), abs=1e-9)


def test_gavel_lp_capacity_binds() -> None:
    # two identical 1-GPU jobs, one GPU: each gets half the time
    x, t = max_min_allocation(np.array([[1.0]]), np.ones(1), np.array([2.0]), np.ones(1))
    assert t == pytest.approx(0.5) and x[0, 0] == pytest.approx(0.5)


def test_gavel_policy_follows_lp() -> None:
    # normalised tput (T / T_equal): small (1.2, 0.8), big (1.6, 0.4); the max-min optimum
    # splits both types 50/50 (t = 1), so both jobs may use both types, a100 first on the tie
    small = job("1", submit=0.0, rt={"a100": 100.0, "t4": 150.0})
    big = job("2", submit=1.0, rt={"a100": 100.0, "t4": 400.0})
    st = ClusterState(0.0, pools(), [small, big], [])
    types = {d.job_id: d.gpu_types for d in GavelPolicy().decide(st)}
    assert types == {"1": ("a100", "t4"), "2": ("a100", "t4")}


def test_fair_routes_only_the_head_and_parks_the_rest_at_the_top_nice() -> None:
    # 2 GPUs in all, all busy: horizon 1 -> a head of 2 GPUs of demand (jobs 0 and 1)
    busy = {"a100": GpuPool("a100", 1, 0), "t4": GpuPool("t4", 1, 0)}
    pend = [job(str(i), submit=float(i), rt={"a100": 100.0, "t4": 900.0}) for i in range(5)]
    pend[4] = job("4", submit=4.0, rt={"a100": 100.0, "t4": 150.0}, features="t4")
    st = ClusterState(0.0, busy, pend, [])
    ds = {d.job_id: d for d in FairPolicy(horizon=1.0, rotate=0.0).decide(st)}
    assert set(ds) == {"0", "1", "2", "3", "4"}
    assert all(ds[j].nice == NICE_MAX for j in ("2", "3", "4"))
    assert max(ds[j].nice or 0 for j in ("0", "1")) < NICE_MAX
    assert ds["2"].gpu_types == ("a100",)  # never routed: types within 2x of its best
    assert ds["4"].gpu_types is None  # already constrained: kept
    whole = {d.job_id: d for d in FairPolicy(horizon=0.0, rotate=0.0).decide(st)}
    assert all((whole[j].nice or 0) < NICE_MAX for j in whole)


def test_fair_exact_depth_orders_the_first_jobs_as_the_whole_queue_would() -> None:
    # exact_depth 3: the first 3 jobs of the fair order get the Nice order and types they get
    # when the whole queue is ordered; the rest wait behind them at the top Nice
    busy = {"a100": GpuPool("a100", 1, 0), "t4": GpuPool("t4", 1, 0)}
    pend = [job(str(i), acct="ab"[i % 2], submit=float(i), rt={"a100": 100.0 + 10 * i, "t4": 900.0})
            for i in range(7)]
    st = ClusterState(0.0, busy, pend, [], usage={"a": 500.0})
    whole = FairPolicy(exact_depth=0, rotate=0.0).decide(st)
    cut = FairPolicy(exact_depth=3, rotate=0.0).decide(st)
    order = [d.job_id for d in sorted(whole, key=lambda d: (d.nice or 0, d.job_id))]
    head, tail = order[:3], order[3:]
    by_id = {d.job_id: d for d in cut}
    assert sorted(head, key=lambda j: (by_id[j].nice or 0, j)) == head
    assert all(by_id[j].gpu_types == {d.job_id: d for d in whole}[j].gpu_types for j in head)
    assert max(by_id[j].nice or 0 for j in head) < NICE_MAX
    assert all(by_id[j].nice == NICE_MAX for j in tail)
    # Slurm looking 3 jobs deep: the depth is raised to twice that (6), the whole queue here
    deep = FairPolicy(exact_depth=3, rotate=0.0).decide(replace(st, scheduler_depth=3))
    assert [(d.job_id, d.nice, d.gpu_types) for d in deep] == [
        (d.job_id, d.nice, d.gpu_types) for d in FairPolicy(exact_depth=6, rotate=0.0).decide(st)]
    assert all((d.nice or 0) < NICE_MAX for d in deep[:6])
    assert FairPolicy().exact_depth == 1000  # the default: twice Slurm's bf_max_job_test
    with pytest.raises(PolicyError, match="exact_depth"):
        FairPolicy(exact_depth=-1)


def test_fair_memo_gives_the_same_decisions_as_a_fresh_policy() -> None:
    pend = [job(str(i), acct="ab"[i % 2], submit=float(i),
                rt={"a100": 100.0 + i, "t4": 300.0 - i}) for i in range(8)]
    st = ClusterState(0.0, pools(2, 2), pend, [], usage={"a": 50.0})
    pol = FairPolicy()
    assert pol.decide(st) == FairPolicy().decide(st)
    # same job records, other pools (t4 gone): the memo must not serve the old usable types
    st2 = ClusterState(0.0, {"a100": GpuPool("a100", 2, 2)}, pend, [], usage={"a": 50.0})
    assert pol.decide(st2) == FairPolicy().decide(st2)
    assert all(d.gpu_types in (None, ("a100",)) for d in pol.decide(st2))
    # records rebuilt with other Nice/Features but the same mappings: the memo's values stand,
    # and the decisions are a fresh policy's
    moved = [replace(p, nice=p.nice + 10 * i, features="t4" if i % 3 else "")
             for i, p in enumerate(pend)]
    st3 = ClusterState(0.0, pools(2, 2), moved, [], usage={"a": 50.0})
    pol.decide(st)
    assert pol.decide(st3) == FairPolicy().decide(st3)
    # a record with another runtime mapping is derived again, not served from the memo
    slower = [replace(p, runtime_s={"a100": 900.0} if i % 2 else {"t4": 50.0})
              for i, p in enumerate(moved)]
    st4 = ClusterState(0.0, pools(2, 2), slower, [], usage={"a": 50.0})
    assert pol.decide(st4) == FairPolicy().decide(st4)


def test_fair_memo_drops_gone_jobs_in_bulk_and_decides_as_a_fresh_policy() -> None:
    from slurm_hase.policy.common import stale_entries_due

    assert not stale_entries_due(2 * 8 + 1024, 8) and stale_entries_due(2 * 8 + 1025, 8)
    many = [job(str(i), acct="ab"[i % 2], submit=float(i), rt={"a100": 100.0 + i})
            for i in range(1100)]
    pol = FairPolicy(rotate=0.0)
    pol.decide(ClusterState(0.0, pools(2, 2), many, []))
    assert len(pol._memo) == 1100
    few = many[:8]
    st = ClusterState(0.0, pools(2, 2), few, [])
    # 1,100 entries > 2 x 8 + 1,024: only the live jobs' entries are kept
    assert pol.decide(st) == FairPolicy(rotate=0.0).decide(st)
    assert sorted(pol._memo) == sorted(j.job_id for j in few)
