"""Metric definitions: water-filling, Jain, Themis isolated runtime."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hase.policy.common import water_fill
from slurm_hase.sim.cluster import ClusterSpec, NodeSpec
from slurm_hase.sim.compare import account_comparison, account_table
from slurm_hase.sim.engine import Sample, SimResult
from slurm_hase.sim.metrics import (
    account_metrics,
    compute,
    isolated_runtime,
    jain,
    jain_over_time,
    jain_over_windows,
    usable_runtime,
)
from slurm_hase.sim.simcluster import SimJob
from slurm_hase.sim.simslurm import SimSlurm
from slurm_hase.sim.throughput import load_throughputs
from slurm_hase.sim.traces import TraceJob


def test_water_fill_gives_a_zero_weight_nothing() -> None:
    """Slurm's Fairshare=0: entitled to nothing, and no division by the zero left over."""
    assert water_fill(10.0, {"a": 1.0, "b": 0.0}, {"a": 4.0, "b": 8.0}) == {"a": 4.0, "b": 0.0}
    assert water_fill(10.0, {"b": 0.0}, {"b": 8.0}) == {"b": 0.0}
    assert water_fill(10.0, {"a": 1.0, "b": 0.0}, {"a": 20.0, "b": 8.0}) == {"a": 10.0, "b": 0.0}


def test_water_fill_caps_demand_and_splits_rest_by_weight() -> None:
    out = water_fill(10.0, {"a": 1.0, "b": 1.0, "c": 2.0}, {"a": 1.0, "b": 10.0, "c": 10.0})
    assert out["a"] == pytest.approx(1.0)
    assert out["b"] == pytest.approx(3.0) and out["c"] == pytest.approx(6.0)


def test_jain() -> None:
    assert jain([1.0, 1.0, 1.0]) == pytest.approx(1.0)
    assert jain([1.0, 0.0]) == pytest.approx(0.5)


def test_isolated_runtime_uses_fast_types_first() -> None:
    cap = {"k80": 10, "v100": 10}
    rt = {"k80": 400.0, "v100": 100.0}
    # alone (N=1): a 1-GPU job gets a whole v100 -> its best runtime
    assert isolated_runtime(rt, 1, 1.0, cap) == pytest.approx(100.0)
    # N=40: 1/4 of a GPU's time on v100 and 1/4 on k80 -> rate 0.25/100 + 0.25/400
    assert isolated_runtime(rt, 1, 40.0, cap) == pytest.approx(1 / (0.25 / 100 + 0.25 / 400))
    # N=15: 2/3 of a GPU's time on v100, and only the 1/3 left to a whole GPU on k80
    assert isolated_runtime(rt, 1, 15.0, cap) == pytest.approx(1 / ((2 / 3) / 100 + (1 / 3) / 400))


def test_jain_over_time_counts_only_contended_samples() -> None:
    # a: 4 GPUs at full speed; b holds 1 GPU but asks for 4 (pending) -> unfair while contended
    unfair = Sample(0.0, 1, 2, {}, {"a": (4.0, 4.0), "b": (1.0, 4.0)})
    # nothing pending: each account holds all it asks for, at half speed for b
    calm = Sample(600.0, 0, 2, {}, {"a": (4.0, 4.0), "b": (0.5, 1.0)})
    shares = {"a": 1.0, "b": 1.0}
    contended = jain_over_time([unfair], 8.0, shares)
    assert contended == pytest.approx(jain([4.0 / 4.0, 1.0 / 4.0]))
    assert jain_over_time([unfair, calm, calm, calm], 8.0, shares) == pytest.approx(contended)
    # something pends but only a has jobs: one account alone is not judged (Jain would be 1)
    alone = Sample(1200.0, 1, 1, {}, {"a": (4.0, 8.0), "b": (0.0, 0.0)})
    assert jain_over_time([unfair, alone], 8.0, shares) == pytest.approx(contended)
    assert jain_over_time([calm], 8.0, shares) is None  # no contended sample: nothing to judge
    assert jain_over_windows([calm], 8.0, shares) is None


def test_jain_over_windows_evens_out_turns_within_a_day_not_across_days() -> None:
    shares = {"a": 1.0, "b": 1.0}
    # both ask for 8 GPUs of 8; a holds all 8 in the first sample, b in the second
    a_turn = Sample(0.0, 1, 1, {}, {"a": (8.0, 8.0), "b": (0.0, 8.0)})
    b_turn = Sample(600.0, 1, 1, {}, {"a": (0.0, 8.0), "b": (8.0, 8.0)})
    assert jain_over_time([a_turn, b_turn], 8.0, shares) == pytest.approx(0.5)
    # same day: each got 8 of the 8 GPU-samples it was due -> perfectly fair
    assert jain_over_windows([a_turn, b_turn], 8.0, shares) == pytest.approx(1.0)
    # b's turn a day later: two windows, each one-sided
    b_next_day = Sample(86400.0 + 600.0, 1, 1, {}, {"a": (0.0, 8.0), "b": (8.0, 8.0)})
    assert jain_over_windows([a_turn, b_next_day], 8.0, shares) == pytest.approx(0.5)
    # uncontended samples are left out, as in jain_over_time
    calm = Sample(1200.0, 0, 1, {}, {"a": (8.0, 8.0), "b": (0.0, 0.0)})
    assert jain_over_windows([a_turn, b_turn, calm], 8.0, shares) == pytest.approx(1.0)
    assert jain_over_windows([calm], 8.0, shares) is None  # never contended: n/a
    # service is judged against entitlement: with shares 3:1, a holding 6 and b 2 is fair
    weighted = Sample(0.0, 1, 2, {}, {"a": (6.0, 8.0), "b": (2.0, 8.0)})
    assert jain_over_windows([weighted], 8.0, {"a": 3.0, "b": 1.0}) == pytest.approx(1.0)
    assert jain_over_windows([weighted], 8.0, shares) == pytest.approx(jain([6.0 / 4, 2.0 / 4]))


def _done(idx: int, account: str, gpus: int, submit: float, start: float, end: float,
          run_before: float = 0.0) -> SimJob:
    job = SimJob(idx, TraceJob(str(idx), submit, account, "u", gpus, end - start),
                 {"v100": end - start}, 2 * (end - start), gpu_type="v100")
    job.start, job.end, job.run_before = start, end, run_before
    return job


def _result(jobs: list[SimJob], samples: list[Sample]) -> SimResult:
    return SimResult(jobs=jobs, samples=samples, gpus_by_type={"v100": 8},
                     shares={"a": 1.0, "b": 1.0}, cycles=0, updates=0, wall_s=0.0)


def test_account_metrics_per_account_jct_wait_gpu_hours_and_level() -> None:
    jobs = [_done(0, "a", 4, 0.0, 0.0, 3600.0), _done(1, "a", 2, 0.0, 1800.0, 5400.0),
            # b's job ran 600 s before a requeue, then waited again: its wait leaves both out
            _done(2, "b", 1, 0.0, 3000.0, 7200.0, run_before=600.0),
            _done(3, "b", 1, 0.0, -1.0, -1.0)]  # never ran: not counted
    jobs[2].earlier_gpu_s = {"v100": 600.0}
    contended = Sample(0.0, 1, 2, {}, {"a": (4.0, 6.0), "b": (1.0, 4.0)})
    calm = Sample(600.0, 0, 2, {}, {"a": (6.0, 6.0), "b": (1.0, 1.0)})
    by = account_metrics(_result(jobs, [contended, calm]))
    assert by["a"]["jobs"] == 2 and by["b"]["jobs"] == 1
    assert by["a"]["avg_jct_s"] == pytest.approx((3600.0 + 5400.0) / 2)
    assert by["a"]["avg_wait_s"] == pytest.approx(1800.0 / 2)
    assert by["b"]["avg_wait_s"] == pytest.approx(7200.0 - 4200.0 - 600.0)
    assert by["a"]["gpu_hours"] == pytest.approx(4.0 + 2.0)
    assert by["b"]["gpu_hours"] == pytest.approx((4200.0 + 600.0) / 3600.0)
    # the contended sample only: 8 GPUs water-filled over demands 6 and 4 -> 4 each
    assert by["a"]["mean_level"] == pytest.approx(4.0 / 4.0)
    assert by["b"]["mean_level"] == pytest.approx(1.0 / 4.0)
    assert account_metrics(_result(jobs, [calm]))["a"]["mean_level"] is None


def test_compute_counts_requeued_runs_and_rho_of_exactly_one() -> None:
    """Two 1-GPU jobs of 100 s on 2 V100s, both in the system throughout. Job 0 ran at once:
    JCT 100 = its isolated runtime, rho exactly 1 (not > 1). Job 1 ran 50 s, was requeued, waited
    30 s and ran its last 70 s: JCT 150, wait 30 (its first run is not waiting), rho 1.5, and
    its first run's 50 GPU-seconds count in the V100s' utilisation."""
    first = _done(0, "a", 1, 0.0, 0.0, 100.0)
    requeued = _done(1, "b", 1, 0.0, 80.0, 150.0, run_before=50.0)
    requeued.runtime = {"v100": 100.0}
    requeued.earlier_gpu_s, requeued.restarts = {"v100": 50.0}, 1
    samples = [Sample(0.0, 0, 2, {}, {}), Sample(150.0, 0, 0, {}, {})]
    res = SimResult(jobs=[first, requeued], samples=samples, gpus_by_type={"v100": 2},
                    shares={"a": 1.0, "b": 1.0}, cycles=0, updates=0, wall_s=0.0)
    m = compute(res)
    assert m["avg_jct_s"] == pytest.approx(125.0) and m["makespan_s"] == pytest.approx(150.0)
    assert m["avg_wait_s"] == pytest.approx(15.0)
    assert m["rho_max"] == pytest.approx(1.5) and m["rho_gt1_share"] == pytest.approx(0.5)
    assert m["util_by_type"]["v100"] == pytest.approx((100.0 + 70.0 + 50.0) / (2 * 150.0))
    assert m["requeues"] == 1


def test_account_comparison_additions_sum_to_the_change_of_the_average() -> None:
    base = [_done(0, "a", 1, 0.0, 0.0, 3600.0), _done(1, "a", 1, 0.0, 0.0, 3600.0),
            _done(2, "b", 1, 0.0, 0.0, 7200.0)]
    other = [_done(0, "a", 1, 0.0, 0.0, 7200.0), _done(1, "a", 1, 0.0, 0.0, 3600.0),
             _done(2, "b", 1, 0.0, 0.0, 3600.0)]
    metrics = {}
    for name, jobs in (("fifo", base), ("fair", other)):
        res = _result(jobs, [])
        jct = [j.end - j.trace.submit_s for j in jobs]
        metrics[name] = {"avg_jct_s": sum(jct) / len(jct), "by_account": account_metrics(res)}
    acc = account_comparison(["fifo", "fair"], metrics)
    assert list(acc) == ["a", "b"]  # most jobs first
    assert acc["a"]["fair"]["jct_vs_baseline"] == pytest.approx(1.5)
    assert acc["b"]["fair"]["jct_vs_baseline"] == pytest.approx(0.5)
    adds = sum(acc[a]["fair"]["adds_to_avg_jct_s"] for a in acc)
    assert adds == pytest.approx(metrics["fair"]["avg_jct_s"] - metrics["fifo"]["avg_jct_s"])
    assert acc["a"]["fair"]["adds_to_avg_jct_s"] == pytest.approx(3600.0 / 3)
    text = account_table(["fifo", "fair"], metrics, limit=1)
    lines = text.splitlines()
    assert lines[2].split()[0] == "account" and lines[3].split()[:2] == ["a", "2"]
    assert lines[4].split()[:3] == ["all", "2", "3"] and lines[4].split()[-1] == "+0.000"
    assert "1 more accounts" in lines[-1]
    # b's job never finished under "late": no ratio and no addition for b, a's still counts
    late = [other[0], other[1], _done(2, "b", 1, 0.0, -1.0, -1.0)]
    metrics["late"] = {"avg_jct_s": 5400.0, "by_account": account_metrics(_result(late, []))}
    acc = account_comparison(["fifo", "late"], metrics)
    assert acc["b"]["late"]["adds_to_avg_jct_s"] is None and acc["b"]["late"]["avg_jct_s"] is None
    assert acc["a"]["late"]["adds_to_avg_jct_s"] == pytest.approx(3600.0 / 3)
    assert account_table(["fifo", "late"], metrics).splitlines()[4].split()[-1] == "-"
    assert account_comparison(["fifo"], {"fifo": {"avg_jct_s": 1.0}}) == {}
    assert account_table(["fifo"], {"fifo": {"avg_jct_s": 1.0}}) == ""


def test_rho_counts_the_types_a_feature_constraint_resolves_to(fixtures_dir: Path) -> None:
    """A trace constraint naming a node feature ("volta") allows the types of the nodes that
    carry it, for rho as for the simulated Slurm: it used to be read as a type name, found no
    type and fell back to every type (the K80 too)."""
    table = load_throughputs(fixtures_dir / "sim" / "gavel_throughputs_excerpt.json")
    spec = ClusterSpec((NodeSpec("k80-1", "k80", 4, ("k80",), ("gpu",)),
                        NodeSpec("v100-1", "v100", 4, ("v100", "volta"), ("gpu",))))
    sim = SimSlurm(spec, table)
    job = sim.add(TraceJob("1", 0.0, "a", "a", 1, 3600.0, 1.0, "ResNet-50 (batch size 64)",
                           ("volta",)), 0.0)
    assert sim.allowed_types(job) == ("v100",)
    assert set(usable_runtime(job)) == {"v100"}
    free = sim.add(TraceJob("2", 0.0, "a", "a", 1, 3600.0, 1.0, "ResNet-50 (batch size 64)"),
                   0.0)
    assert set(usable_runtime(free)) == {"k80", "v100"}
