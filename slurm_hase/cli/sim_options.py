"""`hase simulate`'s option values: numbers, --gpus, --knob, --model (checked before any run)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from slurm_hase.errors import ConfigError

if TYPE_CHECKING:
    from slurm_hase.predict.api import Predictor


class Finite(click.FloatRange):
    """A FloatRange that also refuses nan and inf (which every range check lets through)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


def parse_gpus(text: str) -> dict[str, int]:
    """--gpus TYPE=N,TYPE=N as {type: N}; ConfigError naming the entry that is not TYPE=N."""
    out: dict[str, int] = {}
    for entry in text.split(","):
        name, sep, value = (part.strip() for part in entry.partition("="))
        try:
            if not sep or not name:
                raise ValueError
            count = int(value)
        except ValueError:
            raise ConfigError(f"--gpus {entry!r}: expected TYPE=N (e.g. k80=32,v100=32)") from None
        if name in out:
            raise ConfigError(f"--gpus {entry!r}: GPU type {name!r} given twice")
        out[name] = count
    return out


def parse_knobs(pairs: tuple[str, ...]) -> dict[str, float]:
    """--knob NAME=VALUE pairs as {NAME: VALUE}; ConfigError for a pair that is not NAME=NUMBER
    or a NAME given twice (the later one would silently win)."""
    out: dict[str, float] = {}
    given: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        try:
            if not sep:
                raise ValueError
            number = float(value)
        except ValueError:
            raise ConfigError(f"--knob {pair!r}: expected NAME=NUMBER") from None
        if key in given:
            raise ConfigError(f"--knob {pair}: knob {key!r} given twice (also as "
                              f"{given[key]}); give it once")
        given[key] = pair
        out[key] = number
    return out


def model_option(value: str, used: bool) -> tuple[str | None, Predictor | None]:
    """--model's file (None: the shipped model) and the model read from it now (None when
    unused); ConfigError when it would be ignored (neither --predicted-speeds nor --predictor
    model) or is not a model."""
    from slurm_hase.errors import PredictorError
    from slurm_hase.predict.modelfile import load_predictor, model_source

    source = model_source(value)
    if not used:
        if click.get_current_context().get_parameter_source("model_file") is not (
                click.core.ParameterSource.DEFAULT):
            raise ConfigError("--model without --predicted-speeds or --predictor model: it "
                              "would be ignored; add one of them or leave it out")
        return None, None
    try:
        predictor = load_predictor(source)
    except PredictorError as exc:
        raise ConfigError(f"--model {exc}") from None
    return (None if source is None else str(Path(source).resolve())), predictor


def route_knobs(policies: tuple[str, ...], knobs: dict[str, float]) -> dict[str, dict[str, float]]:
    """Each policy's knobs: NAME goes to every listed policy with such a knob, POLICY.NAME to
    that policy (over a NAME, whatever their order). ConfigError for a policy listed twice, a
    POLICY not listed, or a knob no listed policy has (with close matches); PolicyError for
    an unknown policy."""
    from slurm_hase.policy.registry import policy_knobs

    if dupes := sorted({p for p in policies if policies.count(p) > 1}):
        raise ConfigError(f"--policy {dupes[0]} given twice")
    out: dict[str, dict[str, float]] = {p: {} for p in policies}
    for key, value in sorted(knobs.items(), key=lambda kv: "." in kv[0]):  # NAME, then P.NAME
        target, dot, knob = key.rpartition(".")
        if dot and target not in out:
            raise ConfigError(f"--knob {key}={value:g}: {target!r} is not a --policy here "
                              f"({', '.join(policies)})")
        having = [target] if dot else [p for p in policies if knob in policy_knobs(p)]
        if not having or (dot and knob not in policy_knobs(target)):
            raise _unknown_knob(f"--knob {key}={value:g}", knob, [target] if dot else policies)
        for p in having:
            out[p][knob] = value
    return out


def _unknown_knob(where: str, knob: str, policies: Sequence[str]) -> ConfigError:
    """The error for a knob none of `policies` has: close matches first, then every knob."""
    from slurm_hase.policy.registry import knob_hint, policy_knobs

    hint = knob_hint(knob, {k for p in policies for k in policy_knobs(p)})
    listed = "; ".join(f"{p}: {', '.join(sorted(policy_knobs(p))) or 'none'}" for p in policies)
    who = (f"policy {policies[0]!r} has no knob {knob!r}" if len(policies) == 1
           else f"none of {', '.join(policies)} has a knob {knob!r}")
    return ConfigError(f"{where}: {who}{hint} (knobs: {listed})")
