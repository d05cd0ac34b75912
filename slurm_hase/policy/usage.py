"""Decayed normalised GPU service per account (the U_a of the fair formulation).

Service rate of a running job = num_gpus * gpu_fraction * relative_speed (GPU-equivalents at
its best speed). ``observe`` integrates each job's rate exactly under exponential decay with
half-life h since the previous observation:

    U(t + dt) = U(t) * 2^(-dt/h) + rate * (h / ln 2) * (1 - 2^(-dt/h))

so the result does not depend on how often observe is called while the job set is unchanged.
Only the part of a job's life after max(previous observation, start_time) is counted. The
first observe only sets the clock, as does one with a clock stepped back. The caller passes ``now``; nothing here reads a clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from slurm_hase.errors import PolicyError
from slurm_hase.policy.types import RunningJob


class UsageLedger:
    """Accumulates decayed GPU service per account; state lives in the object."""

    def __init__(self, half_life_s: float, usage: Mapping[str, float] | None = None,
                 last_time: float | None = None) -> None:
        if not (math.isfinite(half_life_s) and half_life_s > 0):
            raise PolicyError(f"knob 'half_life_s'={half_life_s!r} must be > 0")
        self.half_life_s = float(half_life_s)
        self._usage: dict[str, float] = {k: float(v) for k, v in (usage or {}).items()}
        # a NaN would stay NaN through every decay, an inf last_time would stop the clock
        bad = sorted(k for k, v in self._usage.items() if not 0.0 <= v < math.inf)
        if bad:
            raise PolicyError(f"usage ledger: usage of {bad[0]!r} must be finite and >= 0, "
                              f"got {self._usage[bad[0]]!r}")
        if last_time is not None and not math.isfinite(last_time):
            raise PolicyError(f"usage ledger: 'last_time' must be finite, got {last_time!r}")
        self._last: float | None = last_time

    @property
    def last_time(self) -> float | None:
        """Clock value of the latest observation (None before the first)."""
        return self._last

    def observe(self, running: Sequence[RunningJob], now: float) -> None:
        """Decay the ledger to `now` and add the service `running` delivered since last time."""
        last = self._last
        if last is None or now <= last:
            # first call sets the clock; a clock that did not advance adds nothing, and one
            # stepped back (NTP after a bad jump ahead) is the new baseline: kept at the old
            # time, every observation until the clock caught up with it again added nothing
            self._last = now
            return
        h = self.half_life_s
        decay = 0.5 ** ((now - last) / h)
        usage = self._usage
        for acct in usage:
            usage[acct] *= decay
        scale, ln2 = h / math.log(2.0), math.log(2.0)
        # a job running since before `last` (most of them) gets the whole interval's factor
        whole = math.expm1(-(now - last) * ln2 / h)
        for job in running:
            start = job.start_time
            if start <= last:
                factor = whole
            elif start < now:
                factor = math.expm1(-(now - start) * ln2 / h)
            else:
                continue
            gained = -(job.num_gpus * job.gpu_fraction * job.relative_speed) * scale * factor
            usage[job.account] = usage.get(job.account, 0.0) + gained
        self._last = now

    def add_interval(self, account: str, rate: float, start: float, end: float) -> None:
        """Add service delivered at `rate` over [start, end] (e.g. a finished job from sacct),
        decayed to the ledger's clock; the first call on a fresh ledger sets the clock to `end`."""
        if self._last is None:
            self._last = end
        end = min(end, self._last)
        if not (start < end and 0.0 < rate < math.inf):
            return  # nothing delivered, or a NaN/inf that would stay in the ledger for good
        h = self.half_life_s
        gained = rate * (h / math.log(2.0)) * (
            0.5 ** ((self._last - end) / h) - 0.5 ** ((self._last - start) / h))
        self._usage[account] = self._usage.get(account, 0.0) + gained

    def usage(self) -> dict[str, float]:
        """Decayed service per account as of the last observation (a copy)."""
        return dict(self._usage)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able snapshot."""
        return {"half_life_s": self.half_life_s, "last_time": self._last,
                "usage": dict(sorted(self._usage.items()))}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> UsageLedger:
        """Inverse of to_dict; raises PolicyError naming the bad key."""
        try:
            hl = float(data["half_life_s"])
        except (KeyError, TypeError, ValueError) as exc:
            raise PolicyError("usage ledger: bad or missing 'half_life_s'") from exc
        last_raw = data.get("last_time")
        try:
            last = None if last_raw is None else float(last_raw)
            raw = data.get("usage", {})
            if not isinstance(raw, Mapping):
                raise TypeError("not a mapping")
            usage = {str(k): float(v) for k, v in raw.items()}
        except (TypeError, ValueError) as exc:
            raise PolicyError(f"usage ledger: bad 'last_time' or 'usage' ({exc})") from exc
        return cls(hl, usage, last)
