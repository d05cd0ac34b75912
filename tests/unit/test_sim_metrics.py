"""Metric definitions: water-filling, Jain, Themis isolated runtime."""

from __future__ import annotations

import pytest

from slurm_hase.policy.common import water_fill
from slurm_hase.sim.engine import Sample
from slurm_hase.sim.metrics import isolated_runtime, jain, jain_over_time, jain_over_windows


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


def test_jain_over_time_counts_only_contended_samples() -> None:
    # a: 4 GPUs at full speed; b holds 1 GPU but asks for 4 (pending) -> unfair while contended
    unfair = Sample(0.0, 1, 2, {}, {"a": (4.0, 4.0), "b": (1.0, 4.0)})
    # nothing pending: each account holds all it asks for, at half speed for b
    calm = Sample(600.0, 0, 2, {}, {"a": (4.0, 4.0), "b": (0.5, 1.0)})
    shares = {"a": 1.0, "b": 1.0}
    contended = jain_over_time([unfair], 8.0, shares)
    assert contended == pytest.approx(jain([4.0 / 4.0, 1.0 / 4.0]))
    assert jain_over_time([unfair, calm, calm, calm], 8.0, shares) == pytest.approx(contended)
    assert jain_over_time([calm], 8.0, shares) == 1.0  # no contended sample: nothing to judge


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
    assert jain_over_windows([calm], 8.0, shares) == 1.0
