"""Registry, common helpers, fifo and the usage ledger."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from slurm_hase.errors import PolicyError
from slurm_hase.policy.common import NICE_MAX, nice_levels, only_changes, parse_features
from slurm_hase.policy.registry import list_policies, make_policy, policy_knobs
from slurm_hase.policy.types import ClusterState, Decision, GpuPool, PendingJob, RunningJob
from slurm_hase.policy.usage import UsageLedger


def pj(jid: str, submit: float = 0.0, nice: int = 0, features: str = "",
       account: str = "a") -> PendingJob:
    return PendingJob(jid, account, "u", submit, 1, {"a100": 10.0}, nice=nice, features=features)


def test_registry_lists_and_builds_every_policy() -> None:
    names = [n for n, _ in list_policies()]
    assert names == ["fair", "fifo", "gavel", "hase"]
    for n in names:
        assert make_policy(n).name == n
    assert make_policy("fair", theta=0.7).theta == 0.7  # type: ignore[attr-defined]
    assert policy_knobs("hase")["beta"] == 0.8


def test_registry_errors_name_the_problem() -> None:
    with pytest.raises(PolicyError, match="known: fair, fifo, gavel, hase"):
        make_policy("nope")
    with pytest.raises(PolicyError, match="no knob 'gamma'.*theta"):
        make_policy("fair", gamma=1.0)
    with pytest.raises(PolicyError, match="theta"):
        make_policy("fair", theta=2.0)


def test_fifo_decides_nothing() -> None:
    st = ClusterState(0.0, {"a100": GpuPool("a100", 4, 0)}, [pj("1")], [])
    assert make_policy("fifo").decide(st) == []


def test_only_changes_drops_unchanged_attributes() -> None:
    pending = [pj("1", nice=5, features="a100|t4"), pj("2")]
    ds = [Decision("1", nice=5, gpu_types=("a100", "t4")),
          Decision("2", nice=3, gpu_types=None),
          Decision("9", nice=1)]
    out = only_changes(ds, pending)
    assert out == [Decision("2", nice=3)]
    assert only_changes([Decision("1", nice=6, gpu_types=("a100", "t4"))], pending) == [
        Decision("1", nice=6)]
    assert parse_features("a100|T4") == ("a100", "t4")


def test_nice_levels_only_distinct_where_order_matters() -> None:
    a, b, c = pj("1", 1.0), pj("2", 2.0), pj("3", 3.0)
    assert len(set(nice_levels([a, b, c]))) == 1
    lv = nice_levels([c, a, b])
    assert lv[0] < lv[1] == lv[2]
    assert nice_levels([a, b, c], keep=False) == [0, 0, 0]


def test_ledger_halves_after_half_life() -> None:
    led = UsageLedger(half_life_s=100.0)
    led.observe([], 0.0)
    job = RunningJob("1", "acct", "u", "a100", 2, 0.0, 1e9, gpu_fraction=0.5, relative_speed=0.5)
    led.observe([job], 10.0)
    after_run = led.usage()["acct"]
    # rate 2*0.5*0.5 = 0.5 GPU; ~5 GPU-s in 10 s, slightly less because of decay
    assert 4.5 < after_run < 5.0
    led.observe([], 110.0)
    assert led.usage()["acct"] == pytest.approx(after_run / 2)


def test_ledger_step_independent_and_roundtrip() -> None:
    job = RunningJob("1", "x", "u", "t4", 1, 0.0, 1e9)
    one, many = UsageLedger(50.0), UsageLedger(50.0)
    one.observe([job], 0.0)
    one.observe([job], 200.0)
    many.observe([job], 0.0)
    for t in range(10, 201, 10):
        many.observe([job], float(t))
    assert one.usage()["x"] == pytest.approx(many.usage()["x"])
    back = UsageLedger.from_dict(many.to_dict())
    assert back.usage() == many.usage() and back.last_time == 200.0
    with pytest.raises(PolicyError):
        UsageLedger.from_dict({"usage": {}})
    with pytest.raises(PolicyError):
        UsageLedger(0.0)


def test_ledger_counts_only_after_start() -> None:
    led = UsageLedger(1e12)
    led.observe([], 0.0)
    late = RunningJob("1", "x", "u", "t4", 1, 90.0, 1e9)
    led.observe([late], 100.0)
    assert led.usage()["x"] == pytest.approx(10.0, rel=1e-6)


def _slurm_order(jobs: list[PendingJob], levels: list[int]) -> list[str]:
    """What Slurm runs first: lowest Nice, then oldest (then lowest id)."""
    ranked = sorted(zip(levels, jobs, strict=True), key=lambda t: (t[0], t[1].submit_time,
                                                                   t[1].job_id))
    return [j.job_id for _, j in ranked]


def test_nice_levels_reproduce_any_order_with_or_without_current_nice() -> None:
    rng = random.Random(7)
    for _ in range(300):
        n = rng.randint(1, 25)
        jobs = [pj(str(i), float(rng.randint(0, 10)), nice=rng.choice([0, 10, 20, 30, 70, 5]))
                for i in range(n)]
        rng.shuffle(jobs)
        for keep in (True, False):
            levels = nice_levels(jobs, keep=keep)
            assert _slurm_order(jobs, levels) == [j.job_id for j in jobs]
            assert all(v % 10 == 0 and 0 <= v <= 10_000 for v in levels)


def test_nice_levels_keep_current_nice_when_the_head_starts() -> None:
    # wanted order: newest first, so every job needs its own level
    jobs = [pj(str(i), float(100 - i)) for i in range(50)]
    fresh = nice_levels(jobs, keep=False)
    assert fresh == [10 * i for i in range(50)]
    now = [replace(j, nice=lv) for j, lv in zip(jobs, fresh, strict=True)]
    # the head starts and a new job arrives at the tail: nobody else needs a new Nice
    later = now[1:] + [pj("new", 0.5)]
    levels = nice_levels(later)
    changed = [j.job_id for j, lv in zip(later, levels, strict=True) if lv != j.nice]
    assert changed == ["new"]
    assert _slurm_order(later, levels) == [j.job_id for j in later]
    # without keeping, the whole queue would be renumbered
    assert sum(lv != j.nice for j, lv in zip(later, nice_levels(later, keep=False),
                                             strict=True)) == 50


def test_nice_levels_do_not_keep_a_level_that_pushes_the_rest_past_the_cap() -> None:
    jobs = [pj("1", 2.0, nice=NICE_MAX), pj("2", 1.0)]
    levels = nice_levels(jobs)
    assert 0 <= levels[0] < levels[1] < NICE_MAX


def test_nice_levels_separate_accounts_because_fairshare_orders_a_shared_level() -> None:
    a = PendingJob("1", "x", "u", 1.0, 1, {"a100": 10.0})
    b = PendingJob("2", "y", "u", 2.0, 1, {"a100": 10.0})
    c = PendingJob("3", "y", "u", 3.0, 1, {"a100": 10.0})
    lv = nice_levels([a, b, c])
    assert lv[0] < lv[1] == lv[2]  # same account and in age order: one level


def _renice(jobs: list[PendingJob], levels: list[int]) -> list[PendingJob]:
    return [replace(j, nice=lv) for j, lv in zip(jobs, levels, strict=True)]


def test_nice_levels_leave_room_so_an_arrival_changes_only_its_own_nice() -> None:
    # two accounts interleaved: every job has a level of its own, gaps between them
    jobs = _renice(order := [pj(str(i), float(i), account="ab"[i % 2]) for i in range(40)],
                   nice_levels(order))
    for k, pos in enumerate((0, 7, 7, 7, 20, 39)):  # in front, several times in one gap, ...
        new = pj(f"n{k}", 1000.0 + k, account="c")
        jobs = jobs[:pos] + [new] + jobs[pos:]
        levels = nice_levels(jobs)
        assert _slurm_order(jobs, levels) == [j.job_id for j in jobs]
        assert [j.job_id for j, lv in zip(jobs, levels, strict=True) if lv != j.nice] == [new.job_id]
        jobs = _renice(jobs, levels)


def test_nice_levels_spread_a_full_gap_over_its_neighbours() -> None:
    # 20 jobs packed one level apart amid jobs 16 levels apart: an arrival in the packed part
    # moves a window of its neighbours (order-maintenance style), not the queue behind it,
    # and leaves room there for the next arrivals
    levels = [16 * (i + 1) for i in range(90)]
    levels += [levels[-1] + i + 1 for i in range(20)]
    levels += [levels[-1] + 16 * (i + 1) for i in range(90)]
    jobs = [pj(str(i), float(i), account="ab"[i % 2], nice=10 * lv) for i, lv in enumerate(levels)]
    moved = []
    for k in range(4):
        jobs = jobs[:100] + [pj(f"n{k}", 1000.0 + k, account="c")] + jobs[100:]
        new = nice_levels(jobs)
        assert _slurm_order(jobs, new) == [j.job_id for j in jobs]
        moved.append(sum(lv != j.nice for j, lv in zip(jobs, new, strict=True)) - 1)
        jobs = _renice(jobs, new)
    # packed one apart, every arrival would otherwise move the whole queue behind it (100)
    assert 0 < max(moved) <= 40 and sum(moved) <= 60, moved


def test_nice_levels_queue_longer_than_the_levels_keeps_its_head_in_order() -> None:
    # more account changes than levels: the head is ordered exactly, the rest shares the top
    jobs = [pj(str(i), float(i), account="ab"[i % 2]) for i in range(30)]
    levels = nice_levels(jobs, nice_max=200)  # 20 levels
    assert levels[-1] == 200 and levels == sorted(levels)
    head = [j.job_id for j, lv in zip(jobs, levels, strict=True) if lv < 200]
    assert 5 <= len(head) <= 10
    assert _slurm_order(jobs, levels)[:len(head)] == head
    # the next cycle, once 3 of the head started: the rest of the head keeps its Nice
    later = _renice(jobs, levels)[3:]
    again = nice_levels(later, nice_max=200)
    kept = [j.job_id for j, lv in zip(later, again, strict=True) if lv == j.nice and lv < 200]
    assert kept == head[3:]
    assert _slurm_order(later, again)[:len(head)] == [j.job_id for j in later[:len(head)]]


def test_nice_levels_keep_any_order_over_many_cycles() -> None:
    # cycles of a queue with several accounts: some start, some arrive, some move
    rng = random.Random(11)
    for nice_max in (NICE_MAX, 400):
        jobs = [pj(str(i), float(rng.randint(0, 50)), account=rng.choice("abc"))
                for i in range(120)]
        for cyc in range(30):
            levels = nice_levels(jobs, nice_max=nice_max)
            ranked = _slurm_order(jobs, levels)
            ordered = [j.job_id for j, lv in zip(jobs, levels, strict=True) if lv < nice_max]
            assert ranked[:len(ordered)] == ordered
            if nice_max == NICE_MAX:
                assert len(ordered) == len(jobs)
            jobs = _renice(jobs, levels)[rng.randint(0, 5):]
            for k in range(rng.randint(0, 8)):
                jobs.insert(rng.randrange(len(jobs) + 1),
                            pj(f"{cyc}-{k}", float(rng.randint(0, 80)), account=rng.choice("abcd")))
            for _ in range(rng.randint(0, 6)):
                jobs.insert(rng.randrange(len(jobs)), jobs.pop(rng.randrange(len(jobs))))


def test_nice_levels_in_a_crowded_queue_an_arrival_moves_few_jobs() -> None:
    # 3,000 interleaved jobs on 4,000 levels (1.3 per step): no room to spread windows out,
    # so an arrival moves only the jobs up to the nearest free level, never the whole queue
    jobs = [pj(str(i), float(i), account="ab"[i % 2]) for i in range(3000)]
    jobs = _renice(jobs, nice_levels(jobs, nice_max=40_000))
    for k, pos in enumerate((1500, 10, 2990)):
        jobs = jobs[:pos] + [pj(f"n{k}", 9000.0 + k, account="c")] + jobs[pos:]
        levels = nice_levels(jobs, nice_max=40_000)
        assert _slurm_order(jobs, levels) == [j.job_id for j in jobs]
        assert sum(lv != j.nice for j, lv in zip(jobs, levels, strict=True)) <= 10
        jobs = _renice(jobs, levels)
