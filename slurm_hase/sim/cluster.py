"""Simulated cluster spec: the TOML shape of `hase cluster up` (its spec file loads here as it
is), plus `count = N` node groups and [billing].

    [[nodes]]
    name = "a100-[1-2]"      # or: count = 500 (names become <gpu_type>-<i>)
    gpu_type = "a100"        # resolved through the GPU catalog (close matches on a typo)
    gpus = 4
    features = ["a100", "ampere"]   # the canonical type is always added
    mps = 400                # the node's MPS count, as in Gres=gpu:a100:4,mps:400 (default
                             # 100 per GPU); `hase cluster up`'s spec means the same
    cpus = 8                 # (read by `hase cluster up` only; the simulator ignores them)

    [[partitions]]           # optional; default: one partition "gpu" with every node
    name = "gpu"
    nodes = "ALL"            # or a hostlist "a100-[1-2],t4-1", or a list of them

    [[accounts]]             # optional; sacctmgr-like shares (default 1.0 each)
    name = "vc-6214e9"
    shares = 2

    [billing]                # optional TRESBillingWeights per GPU type (slurm-billing baseline)
    a100 = 4.0
"""

from __future__ import annotations

import tomllib
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from slurm_hase.errors import ConfigError, UnknownGpuError
from slurm_hase.predict.catalog import resolve_gpu
from slurm_hase.slurm import hostlist


@dataclass(frozen=True)
class NodeSpec:
    """One simulated node."""

    name: str
    gpu_type: str
    gpus: int
    features: tuple[str, ...]
    partitions: tuple[str, ...]
    mps: int = 100  # MPS units per GPU: the node's Gres mps count / its GPUs


@dataclass(frozen=True)
class ClusterSpec:
    """Nodes, account shares and per-type billing weights."""

    nodes: tuple[NodeSpec, ...]
    shares: Mapping[str, float] = field(default_factory=dict)
    billing: Mapping[str, float] = field(default_factory=dict)

    @property
    def gpus_by_type(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for n in self.nodes:
            out[n.gpu_type] = out.get(n.gpu_type, 0) + n.gpus
        return dict(sorted(out.items()))

    @property
    def total_gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)


def expand_names(expr: str) -> list[str]:
    """Slurm hostlist: "a100-[1-3,7]" -> a100-1, a100-2, a100-3, a100-7 (ConfigError if bad)."""
    try:
        return hostlist.expand(expr)
    except ValueError as exc:
        raise ConfigError(f"bad node name expression {expr!r}: {exc}") from exc


def canonical_type(name: str, where: str) -> str:
    """The catalog key of a GPU name; ConfigError naming `where` and close matches."""
    try:
        return resolve_gpu(name).key
    except UnknownGpuError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def uniform_cluster(gpus_by_type: Mapping[str, int], gpus_per_node: int = 4,
                    shares: Mapping[str, float] | None = None,
                    billing: Mapping[str, float] | None = None,
                    where: str = "gpus") -> ClusterSpec:
    """A cluster with `gpus_by_type[t]` GPUs of each type, `gpus_per_node` per node.

    ConfigError, naming the entry as `where TYPE=N`, for an unknown type, a count that is not
    a positive integer, or a type given twice (e.g. as v100 and V100)."""
    if not gpus_by_type:
        raise ConfigError(f"{where}: no GPU types given")
    nodes: list[NodeSpec] = []
    seen: dict[str, str] = {}
    for raw, total in gpus_by_type.items():
        entry = f"{where} '{raw}={total}'"
        t = canonical_type(raw, entry)
        if t in seen:
            raise ConfigError(f"{entry}: GPU type {t} given twice (also as {seen[t]!r})")
        seen[t] = raw
        count = int(total)
        if count != total or count <= 0:
            raise ConfigError(f"{entry}: the GPU count must be a positive integer")
        full, rest = divmod(count, gpus_per_node)
        sizes = [gpus_per_node] * full + ([rest] if rest else [])
        for i, g in enumerate(sizes, start=1):
            nodes.append(NodeSpec(f"{t}-{i}", t, g, (t,), ("gpu",)))
    return ClusterSpec(tuple(nodes), dict(shares or {}), dict(billing or {}))


def parse_cluster(data: Mapping[str, Any], where: str = "cluster") -> ClusterSpec:
    """Build a ClusterSpec from parsed TOML; ConfigError names the bad field."""
    groups = data.get("nodes")
    if not isinstance(groups, list) or not groups:
        raise ConfigError(f"{where}: needs at least one [[nodes]] table")
    nodes = [node for i, g in enumerate(groups) for node in _node_group(g, f"{where}: nodes[{i}]")]
    names = [n.name for n in nodes]
    if dupes := sorted(n for n, k in Counter(names).items() if k > 1):
        raise ConfigError(f"{where}: duplicate node {dupes[0]!r}")
    part_of: dict[str, list[str]] = {}
    for i, p in enumerate(data.get("partitions", []) or []):
        if not isinstance(p, dict) or not isinstance(p.get("name"), str):
            raise ConfigError(f"{where}: partitions[{i}].name missing")
        try:  # "ALL", a hostlist or a list of them, as `hase cluster up` reads it
            members = hostlist.members(p.get("nodes", "ALL"), names)
        except ValueError as exc:
            raise ConfigError(f"{where}: partitions[{i}].nodes: {exc}") from None
        for name in members:
            part_of.setdefault(name, []).append(p["name"])
    nodes = [replace(n, partitions=tuple(part_of.get(n.name, ["gpu"]))) for n in nodes]
    shares: dict[str, float] = {}
    for i, a in enumerate(data.get("accounts", []) or []):
        try:
            shares[str(a["name"])] = float(a.get("shares", 1.0))
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"{where}: accounts[{i}]: needs name and numeric shares") from None
    billing: dict[str, float] = {}
    for raw, w in (data.get("billing", {}) or {}).items():
        try:
            billing[canonical_type(raw, f"{where}: billing")] = float(w)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: billing.{raw}: not a number") from None
    return ClusterSpec(tuple(nodes), shares, billing)


def _node_group(g: object, here: str) -> list[NodeSpec]:
    """The nodes of one [[nodes]] table (partitions filled in by the caller)."""
    if not isinstance(g, dict):
        raise ConfigError(f"{here}: not a table")
    gtype = canonical_type(str(g.get("gpu_type", "")), f"{here}.gpu_type")
    gpus = g.get("gpus", 0)
    if not isinstance(gpus, int) or gpus <= 0:
        raise ConfigError(f"{here}.gpus: must be a positive integer")
    # the node's MPS count as slurm.conf writes it (Gres=...,mps:400): 100 per GPU by default
    mps = g.get("mps", 100 * gpus)
    if not isinstance(mps, int) or mps <= 0 or mps % gpus:
        raise ConfigError(f"{here}.mps: the node's MPS count (as in Gres=...,mps:N) must be a "
                          f"positive multiple of its {gpus} GPUs, e.g. {100 * gpus}")
    if "count" in g:
        count = g["count"]
        if not isinstance(count, int) or count <= 0:
            raise ConfigError(f"{here}.count: must be a positive integer")
        prefix = str(g.get("name", gtype)).split("[")[0].rstrip("-")
        names = [f"{prefix}-{k}" for k in range(1, count + 1)]
    elif isinstance(g.get("name"), str):
        names = expand_names(g["name"])
    else:
        raise ConfigError(f"{here}: needs name or count")
    feats = tuple(dict.fromkeys([gtype, *[str(f).lower() for f in g.get("features", [])]]))
    return [NodeSpec(name, gtype, gpus, feats, ("gpu",), mps // gpus) for name in names]


def load_cluster(path: Path) -> ClusterSpec:
    """Read a cluster TOML file."""
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    return parse_cluster(data, str(path))
