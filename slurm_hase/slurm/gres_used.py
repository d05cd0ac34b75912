"""GPUs in use on a node, read from its GresUsed (``scontrol show node -d``, sinfo's gres_used).

A GPU that jobs share through MPS or shards is not free for a whole-GPU job, but AllocTRES
counts only whole GPUs (``gres/gpu=2`` beside ``gres/mps=80``). GresUsed names the GPUs each
kind holds, in two shapes (captured in tests/fixtures/slurm/local-*/):
- 22.05, every kind, and 24.11 for whole GPUs: ``gpu:a100:2(IDX:1-2)``, ``mps:a100:1(IDX:0)``,
  ``shard:a100:2(IDX:0-1)``; ``(IDX:N/A)`` when none is held;
- 24.11 for MPS and shards: used/total per GPU in index order, ``mps:a100:80(80/100,0/100,...)``,
  ``shard:a100:14(8/8,6/8,0/8,0/8)``.
A GPU held in any of these ways counts once. An MPS or shard entry without a type is read as
the node's GPUs when the node holds one GPU type; on a node of several types it is left out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from slurm_hase.slurm.tres import parse_gres_item, split_top_level

__all__ = ["gpus_in_use"]

_DETAIL = re.compile(r"\(([^()]*)\)\s*$")
_HOLDERS = frozenset({"gpu", "mps", "shard"})


def _indices(detail: str) -> set[int] | None:
    """GPU indices a GresUsed entry's parenthesis names; None when it names none we can read."""
    if detail.startswith("IDX:"):
        out: set[int] = set()
        for part in detail[4:].split(","):
            lo, _, hi = part.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()):
                return out if part.strip() in ("N/A", "") else None
            out.update(range(int(lo), int(hi or lo) + 1))
        return out
    pairs = [p.partition("/") for p in detail.split(",")]
    if pairs and all(used.isdigit() and sep and total.isdigit() for used, sep, total in pairs):
        return {i for i, (used, _, _) in enumerate(pairs) if int(used) > 0}
    return None


def gpus_in_use(gres_used: str | None, gpus: Mapping[str, int]) -> dict[str, int] | None:
    """GPUs by type that any job holds (whole, as MPS shares or as shards), from a node's
    GresUsed; `gpus` is the node's configured GPUs by type (their keys name the result's).
    None when GresUsed is absent or names no GPU index (the caller keeps AllocTRES's count)."""
    if gres_used is None or not gres_used.strip() or gres_used.strip() == "(null)":
        return None
    types = [t for t, n in gpus.items() if n > 0]
    by_lower = {t.lower(): t for t in types}
    held: dict[str, set[int]] = {}
    read_any = False
    for entry in split_top_level(gres_used):
        match = _DETAIL.search(entry)
        if match is None:
            continue
        item = parse_gres_item(entry)
        if item.name not in _HOLDERS:
            continue
        indices = _indices(match.group(1))
        if indices is None:
            continue
        read_any = True
        if item.gres_type is not None:
            gtype = by_lower.get(item.gres_type.lower())
        else:
            gtype = types[0] if len(types) == 1 else None
        if gtype is not None and indices:
            held.setdefault(gtype, set()).update(indices)
    if not read_any:
        return None
    return {t: min(len(held[t]), gpus[t]) for t in types if held.get(t)}
