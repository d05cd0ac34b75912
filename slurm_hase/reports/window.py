"""Turn sacct-style --since/--until values into epoch seconds for clipping usage to a window."""

from __future__ import annotations

import re
from datetime import datetime

_UNITS = {"minute": 60, "minutes": 60, "hour": 3600, "hours": 3600, "day": 86400, "days": 86400,
          "week": 604800, "weeks": 604800}
_RELATIVE = re.compile(r"^now(?:-(\d+)(minutes?|hours?|days?|weeks?))?$")


def to_epoch(value: str, now: float) -> int | None:
    """"now", "now-7days", ISO "2026-11-29[T22:41[:13]]" (local time) -> epoch; else None."""
    text = value.strip().lower()
    m = _RELATIVE.match(text)
    if m:
        back = int(m.group(1)) * _UNITS[m.group(2)] if m.group(1) else 0
        return int(now) - back
    try:
        return int(datetime.fromisoformat(value.strip()).timestamp())
    except ValueError:
        return None


def window(since: str, until: str, now: float) -> tuple[int, int] | None:
    """(start, end) when both bounds are understood, else None (no clipping)."""
    lo, hi = to_epoch(since, now), to_epoch(until, now)
    if lo is None or hi is None:
        return None
    return (lo, hi)
