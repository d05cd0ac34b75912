"""Parse ``sinfo --json`` into Nodes: 22.05 lists nodes, >= 23.02 lists node/partition records."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from slurm_hase.errors import SlurmParseError
from slurm_hase.slurm.gres_used import gpus_in_use
from slurm_hase.slurm.parse_json import decode, guarded, num, records, states, text
from slurm_hase.slurm.tres import gres_shard_count, mps_from_tres, node_gres_counts, with_held
from slurm_hase.slurm.types import Node

WHAT = "sinfo --json"


def _features(value: str) -> tuple[str, ...]:
    return tuple(f for f in value.split(",") if f and f != "(null)")


def _used(gres_used: str, tres_used: str | None,
          total: dict[str, int]) -> tuple[dict[str, int], int]:
    """GPUs in use by type (whole, or held by MPS shares or shards: gres_used names their
    indices) and MPS. 22.05's gres_used miscounts MPS; its tres_used is right."""
    gpus, mps = node_gres_counts(gres_used)
    gpus = with_held(gpus, gpus_in_use(gres_used, total))
    if tres_used is not None:
        mps = mps_from_tres(tres_used)
    return {k: v for k, v in gpus.items() if v > 0}, mps


def _node_v38(rec: dict[str, Any]) -> Node:
    st = states(rec["state"])
    flags = states(rec.get("state_flags") or [])
    gpus, mps_total = node_gres_counts(text(rec.get("gres")))
    used_gpus, used_mps = _used(text(rec.get("gres_used")), text(rec.get("tres_used")), gpus)
    parts = rec.get("partitions") or []
    if not isinstance(parts, list):
        raise SlurmParseError(WHAT, f"partitions of {rec.get('name')} is not a list")
    return Node(
        name=text(rec["name"]),
        state=st[0] if st else "UNKNOWN",
        state_flags=tuple(st[1:] + flags),
        features=_features(text(rec.get("active_features"))),
        partitions=tuple(text(p) for p in parts),
        gpus=gpus,
        gpus_alloc=used_gpus,
        mps_total=mps_total,
        mps_alloc=used_mps,
        shard_total=gres_shard_count(text(rec.get("gres"))),
        cpus=num(rec.get("cpus")) or 0,
        cpus_alloc=num(rec.get("alloc_cpus")) or 0,
    )


def _nodes_v42(rec: dict[str, Any]) -> list[Node]:
    """One data_parser record; grouped records (several nodes) share per-node values."""
    names = [text(n) for n in rec["nodes"]["nodes"]]
    st = states(rec["node"]["state"])
    gpus, mps_total = node_gres_counts(text(rec["gres"]["total"]))
    used_gpus, used_mps = _used(text(rec["gres"]["used"]), None, gpus)
    part = text(rec.get("partition", {}).get("name"))
    cpus = rec["cpus"]
    share = max(len(names), 1)
    return [
        Node(
            name=name,
            state=st[0] if st else "UNKNOWN",
            state_flags=tuple(st[1:]),
            features=_features(text(rec["features"]["active"])),
            partitions=(part,) if part else (),
            gpus=gpus,
            gpus_alloc=used_gpus,
            mps_total=mps_total,
            mps_alloc=used_mps,
            shard_total=gres_shard_count(text(rec["gres"]["total"])),
            cpus=num(cpus.get("maximum")) or 0,
            cpus_alloc=(num(cpus.get("allocated")) or 0) // share,
        )
        for name in names
    ]


def _merge(nodes: list[Node]) -> list[Node]:
    """Join records of one node listed under several partitions."""
    by_name: dict[str, Node] = {}
    for node in nodes:
        seen = by_name.get(node.name)
        if seen is None:
            by_name[node.name] = node
            continue
        parts = seen.partitions + tuple(p for p in node.partitions if p not in seen.partitions)
        by_name[node.name] = replace(seen, partitions=parts)
    return sorted(by_name.values(), key=lambda n: n.name)


def parse_sinfo_json(raw: str) -> list[Node]:
    """``sinfo --json`` of any supported version -> nodes sorted by name."""
    doc = decode(raw, WHAT)
    if "sinfo" in doc:
        out: list[Node] = []
        for rec in records(doc, WHAT, "sinfo"):
            out.extend(guarded(WHAT, _nodes_v42, rec))
        return _merge(out)
    return _merge([guarded(WHAT, _node_v38, r) for r in records(doc, WHAT, "nodes")])
