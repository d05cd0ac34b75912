"""Simulated cluster spec: the TOML shape of `hase cluster up` (its spec file loads here as it
is), plus `count = N` node groups and [billing].

    [[nodes]]
    name = "a100-[1-2]"      # or: count = 500 (names become <gpu_type>-<i>, or <name>-<i>
                             # with a name beside it: its part before any "[")
    gpu_type = "a100"        # resolved through the GPU catalog (close matches on a typo)
    gpus = 4
    features = ["a100", "ampere"]   # the canonical type is always added
    mps = 400                # the node's MPS count, as in Gres=gpu:a100:4,mps:400 (default
                             # 100 per GPU); `hase cluster up`'s spec means the same
    cpus = 8                 # (read by `hase cluster up` only; the simulator ignores them)

    [[partitions]]           # optional; default: one partition "gpu" with every node
    name = "gpu"
    nodes = "ALL"            # or a hostlist "a100-[1-2],t4-1", or a list of them; every
                             # simulated job goes to "gpu", which must hold every node

    [[accounts]]             # optional; sacctmgr-like shares (default 1.0 each)
    name = "vc-6214e9"
    shares = 2

    [billing]                # optional TRESBillingWeights per GPU type (slurm-billing baseline)
    a100 = 4.0

A key this shape does not have, a value of the wrong type (``gpus = true``), shares that are
not a positive finite number, a billing weight that is negative or not finite, an account or
billing type given twice, or more than MAX_GPUS_PER_TYPE GPUs of a type / MAX_NODES nodes is a
ConfigError naming the file, the table and the key.
"""

from __future__ import annotations

import math
import tomllib
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from slurm_hase.errors import ConfigError, UnknownGpuError, not_utf8
from slurm_hase.predict.catalog import resolve_gpu
from slurm_hase.slurm import hostlist
from slurm_hase.slurm.localcluster import spec
from slurm_hase.slurm.localcluster.spec import check_known_keys

JOB_PARTITION = "gpu"  # the partition every simulated job is submitted to (simslurm.PARTITION)

MAX_GPUS_PER_TYPE = 1_000_000  # GPUs of one type in a simulated cluster
MAX_NODES = 1_000_000  # nodes in a simulated cluster
# the keys of `hase cluster up`'s spec, and a node group may give `count` instead of a hostlist
_NODE_KEYS = ("name", "count", *(k for k in spec.NODE_KEYS if k != "name"))


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


def expand_names(expr: str, where: str = "") -> list[str]:
    """Slurm hostlist: "a100-[1-3,7]" -> a100-1, a100-2, a100-3, a100-7 (ConfigError if bad,
    prefixed with `where`, e.g. "c.toml: nodes[0].name")."""
    try:
        return hostlist.expand(expr)
    except ValueError as exc:
        raise ConfigError(f"{where + ': ' if where else ''}bad node name expression "
                          f"{expr!r}: {exc}") from exc


def _count_names(expr: str, where: str) -> int:
    """How many names a hostlist gives, counted without expanding it (ConfigError if bad)."""
    try:
        return hostlist.count(expr)
    except ValueError as exc:
        raise ConfigError(f"{where}: bad node name expression {expr!r}: {exc}") from exc


def canonical_type(name: str, where: str, runnable: Collection[str] | None = None) -> str:
    """The catalog key of a GPU name; ConfigError naming `where` and close matches (only
    those in `runnable`, the types the simulator has speeds for, when it is given)."""
    try:
        return resolve_gpu(name).key
    except UnknownGpuError as exc:
        if runnable is None:
            raise ConfigError(f"{where}: {exc}") from None
        close = [c for c in exc.close if c in runnable]
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ConfigError(f"{where}: unknown GPU type {name!r}{hint} (the simulator has "
                          f"measured speeds for {', '.join(sorted(runnable))})") from None


def describe_spec(cluster: ClusterSpec) -> dict[str, Any]:
    """The cluster as JSON, enough to build it again: GPUs by type, node groups (nodes alike
    in type, GPUs, MPS, features and partitions, in file order), shares and billing."""
    groups: list[dict[str, Any]] = []
    for n in cluster.nodes:
        shape = {"gpu_type": n.gpu_type, "gpus": n.gpus, "mps_per_gpu": n.mps,
                 "features": list(n.features), "partitions": list(n.partitions)}
        if groups and all(groups[-1][k] == v for k, v in shape.items()):
            groups[-1]["count"] += 1
        else:
            groups.append({**shape, "count": 1})
    return {"gpus_by_type": cluster.gpus_by_type, "nodes": len(cluster.nodes),
            "node_groups": groups, "shares": dict(cluster.shares),
            "billing": dict(cluster.billing)}


def uniform_cluster(gpus_by_type: Mapping[str, int], gpus_per_node: int = 4,
                    shares: Mapping[str, float] | None = None,
                    billing: Mapping[str, float] | None = None,
                    where: str = "gpus", runnable: Collection[str] | None = None) -> ClusterSpec:
    """A cluster with `gpus_by_type[t]` GPUs of each type, `gpus_per_node` per node.

    ConfigError, naming the entry as `where TYPE=N`, for an unknown type, a count that is not
    a positive integer, or a type given twice (e.g. as v100 and V100); close matches for an
    unknown type only among `runnable` when given (canonical_type)."""
    if not gpus_by_type:
        raise ConfigError(f"{where}: no GPU types given")
    nodes: list[NodeSpec] = []
    seen: dict[str, str] = {}
    for raw, total in gpus_by_type.items():
        entry = f"{where} '{raw}={total}'"
        t = canonical_type(raw, entry, runnable)
        if t in seen:
            raise ConfigError(f"{entry}: GPU type {t} given twice (also as {seen[t]!r})")
        seen[t] = raw
        count = int(total)
        if count != total or count <= 0:
            raise ConfigError(f"{entry}: the GPU count must be a positive integer")
        if count > MAX_GPUS_PER_TYPE:
            raise ConfigError(f"{entry}: the GPU count must be at most {MAX_GPUS_PER_TYPE:,} "
                              "(the simulator's limit per GPU type)")
        full, rest = divmod(count, gpus_per_node)
        sizes = [gpus_per_node] * full + ([rest] if rest else [])
        for i, g in enumerate(sizes, start=1):
            nodes.append(NodeSpec(f"{t}-{i}", t, g, (t,), ("gpu",)))
    return ClusterSpec(tuple(nodes), dict(shares or {}), dict(billing or {}))


def parse_cluster(data: Mapping[str, Any], where: str = "cluster",
                  runnable: Collection[str] | None = None) -> ClusterSpec:
    """Build a ClusterSpec from parsed TOML; ConfigError names the bad table and key (close
    matches for an unknown GPU type only among `runnable` when given)."""
    check_known_keys(data, spec.TOP_KEYS, where)
    groups = data.get("nodes")
    if not isinstance(groups, list) or not groups:
        raise ConfigError(f"{where}: needs at least one [[nodes]] table")
    nodes: list[NodeSpec] = []
    group_of: dict[str, int] = {}  # node name -> the [[nodes]] table that first named it
    for i, g in enumerate(groups):
        here = f"{where}: nodes[{i}]"
        for node in _node_group(g, here, MAX_NODES - len(nodes), runnable):
            if (first := group_of.get(node.name)) is not None:
                raise _duplicate(here, node.name, first, i, g)
            group_of[node.name] = i
            nodes.append(node)
    names = [n.name for n in nodes]
    totals = Counter[str]()
    for n in nodes:
        totals[n.gpu_type] += n.gpus
    if over := sorted(t for t, k in totals.items() if k > MAX_GPUS_PER_TYPE):
        raise ConfigError(f"{where}: {totals[over[0]]:,} {over[0]} GPUs: at most "
                          f"{MAX_GPUS_PER_TYPE:,} per GPU type (the simulator's limit)")
    part_of: dict[str, list[str]] = {}
    tables = _tables(data, "partitions", where)
    for i, p in enumerate(tables):
        here = f"{where}: partitions[{i}]"
        check_known_keys(p, spec.PARTITION_KEYS, here)
        if not isinstance(p.get("name"), str) or not p["name"]:
            raise ConfigError(f"{here}.name: missing or not a string")
        if not isinstance(p.get("default", False), bool):
            raise ConfigError(f"{here}.default: must be true or false, got {p['default']!r}")
        try:  # "ALL", a hostlist or a list of them, as `hase cluster up` reads it
            members = hostlist.members(p.get("nodes", "ALL"), names)
        except ValueError as exc:
            raise ConfigError(f"{here}.nodes: {exc}") from None
        for name in members:
            part_of.setdefault(name, []).append(p["name"])
    # no [[partitions]]: one partition with every node; else a node is where the tables put it
    nodes = [replace(n, partitions=tuple(part_of.get(n.name, [] if tables else [JOB_PARTITION])))
             for n in nodes]
    if outside := [n.name for n in nodes if JOB_PARTITION not in n.partitions]:
        # trace rows name no partition: every simulated job is submitted to JOB_PARTITION and
        # started on any node, so a node outside it would run jobs Slurm would never put there
        shown = ", ".join(outside[:3]) + (", ..." if len(outside) > 3 else "")
        raise ConfigError(
            f"{where}: partitions: {len(outside)} node(s) ({shown}) are not in partition "
            f"{JOB_PARTITION!r}, where the simulator submits every trace job (trace rows name no "
            f"partition); add them to it (nodes = \"ALL\") or leave them out of the file")
    return ClusterSpec(tuple(nodes), _shares(data, where), _billing(data, where))


def _duplicate(here: str, name: str, first: int, this: int,
               group: Mapping[str, Any]) -> ConfigError:
    """The error for node `name` of nodes[this] (`here`) that nodes[first] already named; a
    `count` group's names (<gpu_type>-1 ...) are the usual cause, so say so."""
    where = "named twice in this table" if first == this else f"also in nodes[{first}]"
    cause = (f" (a count group's nodes are {name.rsplit('-', 1)[0]}-1 ...: give each group "
             "of the same GPU type its own name beside count)" if "count" in group else "")
    return ConfigError(f"{here}: node {name!r} is {where}{cause}")


def _shares(data: Mapping[str, Any], where: str) -> dict[str, float]:
    """[[accounts]]: name -> shares (a positive finite number, default 1)."""
    shares: dict[str, float] = {}
    for i, a in enumerate(_tables(data, "accounts", where)):
        here = f"{where}: accounts[{i}]"
        check_known_keys(a, spec.ACCOUNT_KEYS, here)
        name = a.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{here}.name: missing or not a string")
        if name in shares:
            raise ConfigError(f"{here}.name: account {name!r} given twice")
        value = a.get("shares", 1.0)
        if _number(value) is None or not value > 0:
            raise ConfigError(f"{here}.shares: must be a positive finite number, got {value!r}")
        shares[name] = float(value)
    return shares


def _billing(data: Mapping[str, Any], where: str) -> dict[str, float]:
    """[billing]: canonical GPU type -> TRESBillingWeight (a finite number >= 0)."""
    table = data.get("billing", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: billing: must be a table of GPU type = weight")
    billing: dict[str, float] = {}
    seen: dict[str, str] = {}
    for raw, w in table.items():
        t = canonical_type(raw, f"{where}: billing.{raw}")
        if t in seen:
            raise ConfigError(f"{where}: billing.{raw}: GPU type {t} given twice (also as "
                              f"{seen[t]!r})")
        seen[t] = raw
        if _number(w) is None or w < 0:
            raise ConfigError(f"{where}: billing.{raw}: must be a finite number >= 0, got {w!r}")
        billing[t] = float(w)
    return billing


def _number(value: object) -> float | None:
    """`value` as a float if it is a finite TOML number (not a boolean), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _tables(data: Mapping[str, Any], key: str, where: str) -> list[dict[str, Any]]:
    """The [[key]] tables of `data` ([] if absent); ConfigError if it is not a list of tables."""
    value = data.get(key, [])
    if not isinstance(value, list):
        raise ConfigError(f"{where}: {key}: must be a list of [[{key}]] tables")
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise ConfigError(f"{where}: {key}[{i}]: not a table")
    return value


def _int(g: Mapping[str, Any], key: str, here: str, default: int) -> int:
    """An integer field (not a boolean) of a [[nodes]] table."""
    value = g.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        shown = str(value).lower() if isinstance(value, bool) else repr(value)
        raise ConfigError(f"{here}.{key}: must be a positive integer, got {shown}")
    return value


def _node_group(g: object, here: str, room: int,
                runnable: Collection[str] | None = None) -> list[NodeSpec]:
    """The nodes of one [[nodes]] table (partitions filled in by the caller); at most `room`."""
    if not isinstance(g, dict):
        raise ConfigError(f"{here}: not a table")
    check_known_keys(g, _NODE_KEYS, here)
    if not isinstance(g.get("gpu_type"), str):
        raise ConfigError(f"{here}.gpu_type: missing or not a string")
    gtype = canonical_type(g["gpu_type"], f"{here}.gpu_type", runnable)
    gpus = _int(g, "gpus", here, 0)
    if not 0 < gpus <= MAX_GPUS_PER_TYPE:
        raise ConfigError(f"{here}.gpus: must be a positive integer (at most "
                          f"{MAX_GPUS_PER_TYPE:,}), got {gpus}")
    # the node's MPS count as slurm.conf writes it (Gres=...,mps:400): 100 per GPU by default
    mps = g.get("mps", 100 * gpus)
    if isinstance(mps, bool) or not isinstance(mps, int) or mps <= 0 or mps % gpus:
        raise ConfigError(f"{here}.mps: the node's MPS count (as in Gres=...,mps:N) must be a "
                          f"positive multiple of its {gpus} GPUs, e.g. {100 * gpus}")
    if "name" in g and not isinstance(g["name"], str):
        raise ConfigError(f"{here}.name: must be a string (a hostlist), got {g['name']!r}")
    if "count" in g:
        count = _int(g, "count", here, 0)
        if count <= 0:
            raise ConfigError(f"{here}.count: must be a positive integer, got {count}")
        prefix = str(g.get("name", gtype)).split("[")[0].rstrip("-")
        size = count
    elif isinstance(g.get("name"), str):
        size = _count_names(g["name"], f"{here}.name")
    else:
        raise ConfigError(f"{here}: needs name or count")
    if size > room:
        raise ConfigError(f"{here}: {size:,} nodes: a cluster has at most {MAX_NODES:,} "
                          "(the simulator's limit)")
    names = ([f"{prefix}-{k}" for k in range(1, count + 1)] if "count" in g
             else expand_names(g["name"], f"{here}.name"))
    feats = g.get("features", [])
    if not isinstance(feats, list) or not all(isinstance(f, str) for f in feats):
        raise ConfigError(f"{here}.features: must be a list of strings, got {feats!r}")
    feats = tuple(dict.fromkeys([gtype, *[f.lower() for f in feats]]))
    return [NodeSpec(name, gtype, gpus, feats, ("gpu",), mps // gpus) for name in names]


def load_cluster(path: Path, runnable: Collection[str] | None = None) -> ClusterSpec:
    """Read a cluster TOML file (`runnable`: see parse_cluster)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: {not_utf8(exc)}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    return parse_cluster(data, str(path), runnable)
