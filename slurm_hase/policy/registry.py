"""Policy registry: names -> factories, with knob checking.

Every policy is a frozen dataclass whose float fields (other than ``name``/``summary``) are its
knobs; ``make_policy("fair", theta=0.3)`` builds one and raises PolicyError for an unknown name
or knob (the message lists what is known) or a bad value: out of the knob's range, a switch
other than 0 or 1, a count that is not a whole number (common.check_knob, SWITCH_KNOBS and
WHOLE_KNOBS).
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Iterable, Mapping

from slurm_hase.errors import PolicyError
from slurm_hase.policy.fair import FairPolicy
from slurm_hase.policy.fifo import FifoPolicy
from slurm_hase.policy.gavel import GavelPolicy
from slurm_hase.policy.hase import HasePolicy
from slurm_hase.policy.types import Policy

PolicyFactory = Callable[..., Policy]

POLICIES: Mapping[str, tuple[PolicyFactory, str]] = {
    "fifo": (FifoPolicy, "Slurm as is: multifactor priority + backfill, no changes"),
    "hase": (HasePolicy, "hardware-aware: constrain each job to the GPU type that finishes it first"),
    "fair": (FairPolicy, "spatiotemporal fairness: nice by account deficit, fast GPUs to the "
                         "least-served account's biggest gainers"),
    "gavel": (GavelPolicy, "Gavel heterogeneity-aware max-min fairness over effective throughput"),
}

_NOT_KNOBS = frozenset({"name", "summary"})


def list_policies() -> list[tuple[str, str]]:
    """(name, one-line summary) for every policy, sorted by name."""
    return sorted((name, summary) for name, (_, summary) in POLICIES.items())


def policy_knobs(name: str) -> dict[str, float]:
    """Knob names of a policy with their defaults: its numeric fields that the constructor takes
    (not a flag such as fifo's `passive`, which is no knob)."""
    factory = _factory(name)
    if not dataclasses.is_dataclass(factory):
        return {}
    return {
        f.name: float(f.default)
        for f in dataclasses.fields(factory)
        if f.name not in _NOT_KNOBS and f.init and not isinstance(f.default, bool)
        and isinstance(f.default, (int, float))
    }


def knob_hint(knob: str, known: Iterable[str]) -> str:
    """"; did you mean 'theta'?" for a misspelt knob (close matches among `known`), else ""."""
    close = difflib.get_close_matches(knob, sorted(known), n=3, cutoff=0.6)
    return f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""


def make_policy(name: str, **knobs: float) -> Policy:
    """Build policy `name` with `knobs`; PolicyError for an unknown name, knob (with close
    matches) or value."""
    factory = _factory(name)
    known = policy_knobs(name)
    for knob in knobs:
        if knob not in known:
            listed = ", ".join(sorted(known)) or "none"
            raise PolicyError(f"policy {name!r} has no knob {knob!r}{knob_hint(knob, known)} "
                              f"(knobs: {listed})")
    return factory(**{k: float(v) for k, v in knobs.items()})


def _factory(name: str) -> PolicyFactory:
    try:
        return POLICIES[name][0]
    except KeyError:
        raise PolicyError(
            f"unknown policy {name!r} (known: {', '.join(sorted(POLICIES))})"
        ) from None
