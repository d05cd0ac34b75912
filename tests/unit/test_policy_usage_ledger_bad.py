"""A stored usage ledger with values no ledger produces is refused (the daemon then starts a new
one, seeded from sacct), instead of carrying them forever."""

from __future__ import annotations

import json
import math

import pytest

from slurm_hase.errors import PolicyError
from slurm_hase.policy.types import RunningJob
from slurm_hase.policy.usage import UsageLedger


@pytest.mark.parametrize("value", [math.nan, math.inf, -5.0])
def test_usage_that_is_not_finite_and_non_negative_is_refused(value: float) -> None:
    # json.loads reads NaN and Infinity; NaN stayed NaN through every decay and every
    # observe, so fair put that account's jobs last for good
    snap = json.loads(json.dumps({"half_life_s": 3600.0, "last_time": 0.0,
                                  "usage": {"a": 1.0, "b": value}}))
    with pytest.raises(PolicyError, match="'b'"):
        UsageLedger.from_dict(snap)


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_a_last_time_that_is_not_finite_is_refused(value: float) -> None:
    # inf: every later observe saw now <= last and added nothing, for good; NaN turned all
    # usage NaN at the next observe
    with pytest.raises(PolicyError, match="last_time"):
        UsageLedger.from_dict({"half_life_s": 3600.0, "last_time": value, "usage": {}})


def test_a_sound_ledger_still_loads_and_counts() -> None:
    led = UsageLedger.from_dict({"half_life_s": 3600.0, "last_time": 0.0, "usage": {"a": 0.0}})
    led.observe([RunningJob("1", "a", "u", "v100", 1, 0.0, 1e9)], 3600.0)
    assert 0.0 < led.usage()["a"] < 3600.0


@pytest.mark.parametrize(("rate", "start"), [(math.nan, 0.0), (math.inf, 0.0), (1.0, math.nan)])
def test_add_interval_ignores_a_nan_or_inf_record(rate: float, start: float) -> None:
    # a NaN rate or start passed the `end <= start or rate <= 0` test and made the usage NaN
    led = UsageLedger(3600.0, {"a": 10.0}, 7200.0)
    led.add_interval("a", rate, start, 3600.0)
    assert led.usage() == {"a": 10.0}
    led.add_interval("a", 1.0, 0.0, 3600.0)
    assert 10.0 < led.usage()["a"] < math.inf
