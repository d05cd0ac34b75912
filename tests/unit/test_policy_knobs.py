"""Knob values: switches are 0 or 1, counts are whole numbers, everywhere a policy is built."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from slurm_hase.errors import PolicyError
from slurm_hase.policy.common import SWITCH_KNOBS, WHOLE_KNOBS, check_knob
from slurm_hase.policy.fair import FairPolicy
from slurm_hase.policy.registry import POLICIES, make_policy, policy_knobs

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.frontier import settings  # noqa: E402


def _owner(knob: str) -> str:
    return next(p for p in POLICIES if knob in policy_knobs(p))


@pytest.mark.parametrize("knob", sorted(SWITCH_KNOBS))
@pytest.mark.parametrize("value", [0.5, 0.01, 0.999])
def test_switch_knobs_refuse_values_between_off_and_on(knob: str, value: float) -> None:
    with pytest.raises(PolicyError, match=rf"knob '{knob}'={value}: a switch, must be 0 \(off\) "
                                          rf"or 1 \(on\)"):
        make_policy(_owner(knob), **{knob: value})
    for on_off in (0.0, 1.0):
        assert getattr(make_policy(_owner(knob), **{knob: on_off}), knob) == on_off


@pytest.mark.parametrize("knob", sorted(WHOLE_KNOBS))
def test_count_knobs_refuse_fractions(knob: str) -> None:
    with pytest.raises(PolicyError, match=rf"knob '{knob}'=2.5: must be a whole number from"):
        make_policy(_owner(knob), **{knob: 2.5})
    assert getattr(make_policy(_owner(knob), **{knob: 4.0}), knob) == 4.0


def test_direct_construction_is_checked_too() -> None:
    with pytest.raises(PolicyError, match="'narrow'=0.5: a switch"):
        FairPolicy(narrow=0.5)
    with pytest.raises(PolicyError, match="'exact_depth'=1.5: must be a whole number from 0 to 1e"):
        FairPolicy(exact_depth=1.5)


def test_range_errors_come_first_and_real_knobs_take_fractions() -> None:
    with pytest.raises(PolicyError, match=r"'sfq'=2.0 out of range \[0, 1\]"):
        check_knob("sfq", 2.0, 0.0, 1.0)
    assert check_knob("theta", 0.37, 0.0, 1.0) == 0.37
    assert check_knob("floor", 0.57, 0.0, 1.0) == 0.57


def test_every_switch_and_count_is_a_knob_of_some_policy() -> None:
    knobs = {k for p in POLICIES for k in policy_knobs(p)}
    assert SWITCH_KNOBS.issubset(knobs) and WHOLE_KNOBS.issubset(knobs)


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policys_defaults_are_valid(name: str) -> None:
    make_policy(name, **policy_knobs(name))


def test_every_bench_row_is_still_valid() -> None:
    for row in settings():
        make_policy(row.policy, **row.knobs)


def test_the_simulate_cli_names_the_knob(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                         fixtures_dir: Path) -> None:
    from tests.conftest import run_main

    code, _, err = run_main(["simulate", "--trace", str(fixtures_dir / "sim" / "nope.trace"),
                             "--policy", "fair", "--knob", "rotate=0.5",
                             "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and err == ("hase: error: knob 'rotate'=0.5: a switch, must be 0 (off) or "
                                 "1 (on)\n")


def test_a_flag_that_is_not_a_knob_is_refused_not_a_crash() -> None:
    assert policy_knobs("fifo") == {}
    with pytest.raises(PolicyError, match=r"policy 'fifo' has no knob 'passive' \(knobs: none\)"):
        make_policy("fifo", passive=0.0)


def test_a_misspelt_knob_gets_close_matches_wherever_policies_are_built() -> None:
    """The daemon's [policy.knobs] and `hase simulate --knob` build policies through
    make_policy: a typo names the knob meant before the whole list."""
    with pytest.raises(PolicyError, match=r"^policy 'fair' has no knob 'thta'; did you mean "
                                          r"'theta'\? \(knobs: "):
        make_policy("fair", thta=0.2)
    with pytest.raises(PolicyError, match=r"^policy 'fair' has no knob 'zzz' \(knobs: "):
        make_policy("fair", zzz=1.0)
