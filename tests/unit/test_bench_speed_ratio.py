"""bench/policies.py's speed line against the Slurm baseline on the same host."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.policies import _speed_ratios  # noqa: E402


def test_each_policy_is_put_against_the_fifo_run_of_the_same_invocation() -> None:
    runs = [{"policy": "fair", "sim_wall_s": 914.0}, {"policy": "fifo", "sim_wall_s": 369.0},
            {"policy": "hase", "sim_wall_s": 369.0}]
    assert _speed_ratios(runs) == [
        "Speed (fair) / Slurm baseline (fifo) on this host: 2.48x",
        "Speed (hase) / Slurm baseline (fifo) on this host: 1.00x"]


def test_no_ratio_without_a_baseline_run() -> None:
    assert _speed_ratios([{"policy": "fair", "sim_wall_s": 914.0}]) == []
    assert _speed_ratios([{"policy": "fifo", "sim_wall_s": 369.0}]) == []
