"""Slurm hostlist expressions: "a100-[1-2],t4-1" <-> names."""

from __future__ import annotations

import re
from collections.abc import Sequence

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
MAX_HOSTS = 1_000_000  # a larger expression is a typo, not a cluster: refused before expanding


def _split_top_level(expr: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    current = ""
    for ch in expr:
        depth += (ch == "[") - (ch == "]")
        if depth < 0:
            raise ValueError(f"unbalanced ']' in hostlist {expr!r}")
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    if depth != 0:
        raise ValueError(f"unbalanced '[' in hostlist {expr!r}")
    parts.append(current)
    return [p for p in (s.strip() for s in parts) if p]


def _ranges(name: str, body: str) -> list[tuple[str, str]]:
    """The (lo, hi) digit strings of a bracket body; ValueError naming a bad or descending one."""
    out = []
    for rng in body.split(","):
        m = _RANGE.match(rng)
        if m is None:
            raise ValueError(f"bad range {rng!r} in hostlist element {name!r}")
        lo, hi = m[1], m[2] or m[1]
        if int(hi) < int(lo):
            raise ValueError(f"descending range {rng!r} in hostlist element {name!r}")
        out.append((lo, hi))
    return out


def _split_bracket(name: str) -> tuple[str, str, str] | None:
    """(head, bracket body, tail) of the first bracket of an element; None when it has none."""
    start = name.find("[")
    if start < 0:
        if "]" in name:
            raise ValueError(f"bad hostlist element {name!r}")
        return None
    end = name.find("]", start)
    return name[:start], name[start + 1:end], name[end + 1:]


def _count_one(name: str) -> int:
    parts = _split_bracket(name)
    if parts is None:
        return 1
    _, body, tail = parts
    return sum(int(hi) - int(lo) + 1 for lo, hi in _ranges(name, body)) * _count_one(tail)


def _expand_one(name: str) -> list[str]:
    parts = _split_bracket(name)
    if parts is None:
        return [name]
    head, body, tail = parts
    return [n for lo, hi in _ranges(name, body) for i in range(int(lo), int(hi) + 1)
            for n in _expand_one(f"{head}{str(i).zfill(len(lo))}{tail}")]


def count(expr: str) -> int:
    """How many names `expr` gives, counted without expanding it; ValueError if malformed."""
    if expr.strip() in ("", "(null)"):
        return 0
    return sum(_count_one(part) for part in _split_top_level(expr.strip()))


def expand(expr: str) -> list[str]:
    """Expand "a100-[1-2,4],r[1-2]n1" into names (zero padding kept); ValueError if malformed
    or when it names more than MAX_HOSTS (counted first, never expanded)."""
    n = count(expr)
    if n > MAX_HOSTS:
        raise ValueError(f"hostlist {expr[:60]!r} names {n:,} hosts, more than {MAX_HOSTS:,} hosts")
    return [] if n == 0 else [name for part in _split_top_level(expr.strip())
                              for name in _expand_one(part)]


def compress(names: list[str]) -> str:
    """Inverse of expand for simple prefix+number names (keeps order of first appearance)."""
    groups: dict[str, list[int]] = {}
    plain: list[str] = []
    for name in names:
        m = re.match(r"^(.*?)(\d+)$", name)
        if m is None or m.group(2).startswith("0") and len(m.group(2)) > 1:
            plain.append(name)
            continue
        groups.setdefault(m.group(1), []).append(int(m.group(2)))
    out = list(plain)
    for prefix, nums in groups.items():
        nums = sorted(set(nums))
        if len(nums) == 1:
            out.append(f"{prefix}{nums[0]}")
            continue
        spans: list[str] = []
        start = prev = nums[0]
        for n in nums[1:]:
            if n != prev + 1:
                spans.append(f"{start}" if start == prev else f"{start}-{prev}")
                start = n
            prev = n
        spans.append(f"{start}" if start == prev else f"{start}-{prev}")
        out.append(f"{prefix}[{','.join(spans)}]")
    return ",".join(out)


def members(value: object, all_names: Sequence[str]) -> list[str]:
    """The nodes a partition's `nodes` names, in a cluster spec: "ALL", a hostlist string
    ("a100-[1-2],t4-1") or a list of them. ValueError says what is wrong (a bad expression,
    a node not in `all_names`, or another kind of value)."""
    if value == "ALL":
        return list(all_names)
    if isinstance(value, str):
        exprs = [value]
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        exprs = list(value)
    else:
        raise ValueError(f'expected "ALL", a hostlist string or a list of them, got {value!r}')
    names = [n for expr in exprs for n in expand(expr)]
    known = set(all_names)
    if unknown := sorted({n for n in names if n not in known}):
        raise ValueError(f"unknown nodes {', '.join(unknown)}")
    return names
