"""--since/--until in sacct's time forms -> epoch seconds, so usage is clipped to the very window
sacct is asked for; a value hase cannot read is refused (ConfigError), never passed on unclipped.

Semantics follow Slurm's parse_time as sacct calls it (times in the past): local time; a date
without a year is this year, or last year when its month is still to come; a time of day without
a date is today; "today" is today's midnight. hase reads the user's forms here, in the user's
time zone, and hands sacct the epochs as UTC stamps (`stamp`; the adapter runs sacct with
TZ=UTC), so a bound in the autumn hour that daylight saving time repeats is not ambiguous.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta

from slurm_hase.errors import ConfigError
from slurm_hase.slurm.types import AccountingRecord, JobState

FORMS = ("now[{+|-}COUNT[seconds|minutes|hours|days|weeks]] (e.g. now-7days), "
         "YYYY-MM-DD[THH:MM[:SS]], MM/DD[/YY], MM.DD[.YY] or MMDD[YY] (each optionally "
         "followed by -HH:MM[:SS]), HH:MM[:SS][AM|PM], today, tomorrow, midnight, noon, "
         "elevenses, fika, teatime (local time)")
_UNITS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800}
_RELATIVE = re.compile(r"now(?:\s*([+-])\s*(\d+)\s*(?:(second|minute|hour|day|week)s?)?)?")
_NAMED_TIMES = {"midnight": 0, "elevenses": 11, "noon": 12, "fika": 15, "teatime": 16}
_DATE = (r"(?P<day>today|tomorrow)"
         r"|(?P<y>\d{4})-(?P<m>\d{2})-(?P<d>\d{1,2})"
         r"|(?P<m2>\d{1,2})(?P<sep>[/.])(?P<d2>\d{1,2})(?:(?P=sep)(?P<y2>\d{2}))?"
         r"|(?P<m3>\d{2})(?P<d3>\d{2})(?P<y3>\d{2})?")
_TIME = (r"(?P<named>midnight|elevenses|noon|fika|teatime)"
         r"|(?P<hh>\d{1,2}):(?P<mm>\d{2})(?::(?P<ss>\d{2}))?\s*(?P<ampm>am|pm)?")
_DATED = re.compile(rf"(?:{_DATE})(?:(?:t|-|\s+)(?:{_TIME}))?")  # matched in lower case
_CLOCK = re.compile(_TIME)


def _clock(found: dict[str, str | None]) -> time | None:
    """The time of day of a match (None: no time given); ValueError when out of range."""
    named, hh, ampm = found.get("named"), found.get("hh"), found.get("ampm")
    if named:
        return time(_NAMED_TIMES[named])
    if hh is None:
        return None
    hour = int(hh)
    if ampm is not None:
        if not 1 <= hour <= 12:
            raise ValueError(f"hour {hour} with {ampm.upper()}")
        hour = hour % 12 + (12 if ampm == "pm" else 0)
    return time(hour, int(found.get("mm") or 0), int(found.get("ss") or 0))


def _day(found: dict[str, str | None], today: date) -> date:
    """The date of a match (today when none is given); ValueError when it is no date."""
    if found.get("day") == "tomorrow":
        return today + timedelta(days=1)
    if found.get("y"):
        return date(int(found["y"] or 0), int(found["m"] or 0), int(found["d"] or 0))
    month, day, year = ((found["m2"], found["d2"], found["y2"]) if found.get("m2")
                        else (found.get("m3"), found.get("d3"), found.get("y3")))
    if month is None:
        return today  # "today", or a time of day alone
    if year is not None:
        return date(2000 + int(year), int(month), int(day or 0))
    back = int(month) > today.month  # sacct looks back: a month still to come was last year
    return date(today.year - back, int(month), int(day or 0))


def _epoch(text: str, now: float) -> int | None:
    """Epoch seconds of a lower-case sacct time form; None when it is none; ValueError when it
    names no real date or time."""
    rel = _RELATIVE.fullmatch(text)
    if rel:
        sign, count, unit = rel.groups()
        delta = int(count) * _UNITS[unit or "second"] if count else 0
        at = int(now) + (delta if sign == "+" else -delta)
        datetime.fromtimestamp(at)  # in range?
        return at
    found = _DATED.fullmatch(text) or _CLOCK.fullmatch(text)
    if not found:
        return None
    parts = found.groupdict()
    day = _day(parts, datetime.fromtimestamp(now).date())
    return int(datetime.combine(day, _clock(parts) or time()).timestamp())


def parse_time(value: str, now: float, option: str = "time") -> int:
    """A sacct time form (see FORMS) -> epoch seconds; ConfigError naming `option` and the
    value, with the accepted forms, when hase cannot read it."""
    try:
        at = _epoch(value.strip().lower(), now)
    except (ValueError, OverflowError, OSError) as exc:
        problem = f"not a valid date or time ({exc})"
    else:
        if at is not None:
            return at
        problem = "unknown time form"
    raise ConfigError(f"bad {option} {value!r}: {problem}; accepted: {FORMS}")


def to_epoch(value: str, now: float) -> int | None:
    """Like parse_time, but None for a value hase cannot read."""
    try:
        return parse_time(value, now)
    except ConfigError:
        return None


def stamp(epoch: int) -> str:
    """Epoch -> UTC YYYY-MM-DDTHH:MM:SS, which sacct run by the adapter (TZ=UTC) reads back to
    the same second; for Slurm's commands only (people read `local_stamp`)."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def local_stamp(epoch: int) -> str:
    """Epoch -> YYYY-MM-DDTHH:MM:SS in this process's time zone, as --since/--until read it."""
    return datetime.fromtimestamp(epoch).strftime("%Y-%m-%dT%H:%M:%S")


def window(since: str | None, until: str, now: float) -> tuple[int, int]:
    """(start, end) epoch seconds of --since/--until (since None: open, epoch 0); ConfigError
    when either cannot be read or the window is empty (start not before end)."""
    lo = 0 if since is None else parse_time(since, now, "--since")
    hi = parse_time(until, now, "--until")
    if lo >= hi:
        raise ConfigError(f"empty window: --since {since!r} ({local_stamp(lo)}) is not before "
                          f"--until {until!r} ({local_stamp(hi)})")
    return (lo, hi)


def overlaps(rec: AccountingRecord, span: tuple[int, int]) -> bool:
    """Whether the live report counts a job for span=(start, end). A pending job: submitted by
    the end (live, pending jobs come from squeue: queue.with_queue). Any other: as sacct -S/-E
    (no --state) lists it, eligible before the end (a job whose --begin is after the window is
    not in it) and not ended before the start (no end = still there); without an eligible
    time, the start stands for it."""
    if rec.state is JobState.PENDING:
        return rec.submit_time is None or rec.submit_time <= span[1]
    begin = rec.eligible_time if rec.eligible_time is not None else rec.start_time
    if begin is None or begin >= span[1]:
        return False
    return rec.end_time is None or rec.end_time >= span[0]
