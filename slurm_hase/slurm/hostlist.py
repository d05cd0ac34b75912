"""Slurm hostlist expressions: "a100-[1-2],t4-1" <-> names."""

from __future__ import annotations

import re

_BRACKET = re.compile(r"^(?P<prefix>[^\[\]]*)\[(?P<ranges>[^\[\]]+)\](?P<suffix>[^\[\]]*)$")


def _split_top_level(expr: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    current = ""
    for ch in expr:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
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


def expand(expr: str) -> list[str]:
    """Expand "a100-[1-2,4],t4-1" into ["a100-1", "a100-2", "a100-4", "t4-1"]."""
    names: list[str] = []
    for part in _split_top_level(expr.strip()):
        match = _BRACKET.match(part)
        if match is None:
            if "[" in part or "]" in part:
                raise ValueError(f"bad hostlist element {part!r}")
            names.append(part)
            continue
        for rng in match["ranges"].split(","):
            lo_text, _, hi_text = rng.partition("-")
            if not lo_text.isdigit() or (hi_text and not hi_text.isdigit()):
                raise ValueError(f"bad range {rng!r} in hostlist {expr!r}")
            lo, hi = int(lo_text), int(hi_text or lo_text)
            if hi < lo:
                raise ValueError(f"descending range {rng!r} in hostlist {expr!r}")
            width = len(lo_text)
            for i in range(lo, hi + 1):
                names.append(f"{match['prefix']}{i:0{width}d}{match['suffix']}")
    return names


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
        for n in nums[1:] + [None]:  # type: ignore[list-item]
            if n is not None and n == prev + 1:
                prev = n
                continue
            spans.append(f"{start}" if start == prev else f"{start}-{prev}")
            if n is not None:
                start = prev = n
        out.append(f"{prefix}[{','.join(spans)}]")
    return ",".join(out)
