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


def test_the_speed_line_says_where_the_time_went() -> None:
    from bench.policies import _speed_line

    run = {"policy": "fair", "jobs": 100000, "gpus": 2000, "sim_wall_s": 800.0,
           "total_wall_s": 810.0, "cycles": 41415, "quiet_cycles": 25490, "updates": 2982556,
           "max_rss_mb": 291.0,
           "daemon_stages_s": {"observe": 40.0, "state": 160.0, "decide": 280.0, "plan": 24.0,
                               "act": 16.0}}
    line = _speed_line(run)
    assert line.endswith("; the daemon's cycles 65% of it (observe 5%, state 20%, decide 35%, "
                         "plan 3%, act 2%), the simulated Slurm and the engine 35%")
    assert _speed_line({**run, "daemon_stages_s": {}}).endswith("(target < 600 s, < 4096 MB)")
