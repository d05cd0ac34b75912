"""slurm.conf values the simulated Slurm honours (sched.py).

A module of its own, never compiled (setup.py's COMPILED): a frozen dataclass compiled with
mypyc cannot be unpickled, and `hase simulate --workers` sends it to its worker processes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class SlurmConfig:
    """slurm.conf values the simulator honours (typical-site defaults)."""

    weight_age: int = 1000
    weight_fairshare: int = 10000
    max_age_s: float = 7 * 86400.0
    decay_half_life_s: float = 7 * 86400.0
    calc_period_s: float = 300.0
    sched_interval_s: float = 60.0
    bf_interval_s: float = 30.0
    default_queue_depth: int = 100
    bf_max_job_test: int = 500
    billing: Mapping[str, float] = field(default_factory=dict)  # TRESBillingWeights per type
