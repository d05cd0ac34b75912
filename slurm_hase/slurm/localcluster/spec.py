"""The cluster spec file (TOML): nodes by GPU type, partitions, accounts. Validated here.

An unknown key is refused (a typo never passes silently); ``[billing]`` is the simulator's
(`hase simulate --cluster`) and is ignored here. Errors name the file, the table and the key.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from slurm_hase.errors import ConfigError, not_utf8
from slurm_hase.slurm import hostlist

# Keys of each table (the simulator's cluster files read the same ones, plus a node group's
# `count`); `billing` (top level) is read by the simulator only.
TOP_KEYS = ("name", "port_base", "slurmd_port_base", "nodes", "partitions", "accounts", "billing",
            "prolog", "epilog", "gpu_device_nodes")
# a GPU type as Slurm's GRES type: a plain name, or a MIG instance's (predict/mig.py)
_GPU_TYPE = re.compile(r"[a-z][a-z0-9_]*(?:_\d+g\.\d+gb)?")
_FEATURE = re.compile(r"[A-Za-z0-9_.]+")
NODE_KEYS = ("name", "gpu_type", "gpus", "cpus", "memory_mb", "features", "mps")
# `shards` (Slurm's gres/shard, >= 22.05) is the local cluster's only: the simulator has none
CLUSTER_NODE_KEYS = (*NODE_KEYS, "shards")
PARTITION_KEYS = ("name", "nodes", "default")
ACCOUNT_KEYS = ("name", "shares", "users")


@dataclass(frozen=True)
class NodeGroup:
    """Nodes that share a GPU type and shape."""

    names: tuple[str, ...]
    gpu_type: str
    gpus: int
    cpus: int
    memory_mb: int
    features: tuple[str, ...]
    mps: int
    shards: int = 0  # the node's gres/shard count (Gres=...,shard:N), spread over its GPUs

    @property
    def expr(self) -> str:
        return hostlist.compress(list(self.names))


@dataclass(frozen=True)
class PartitionSpec:
    name: str
    nodes: str  # hostlist or "ALL"
    default: bool


@dataclass(frozen=True)
class AccountSpec:
    name: str
    shares: int
    users: tuple[str, ...]


@dataclass(frozen=True)
class ClusterSpec:
    """A whole cluster: what `hase cluster up` builds."""

    name: str
    port_base: int
    slurmd_port_base: int
    node_groups: tuple[NodeGroup, ...]
    partitions: tuple[PartitionSpec, ...]
    accounts: tuple[AccountSpec, ...]
    # slurm.conf Prolog=/Epilog= (absolute paths; e.g. the MPS scripts in a live test)
    prolog: str | None = None
    epilog: str | None = None
    # fake GPUs as character device nodes, which Slurm hands to prologs and tasks as GPUs
    # (CUDA_VISIBLE_DEVICES, SLURM_JOB_GPUS); False: empty regular files, which it does not
    gpu_device_nodes: bool = True

    @property
    def node_names(self) -> list[str]:
        return [n for g in self.node_groups for n in g.names]

    @property
    def gpu_types(self) -> list[str]:
        return sorted({g.gpu_type for g in self.node_groups})

    @property
    def has_shards(self) -> bool:
        """Whether a node offers gres/shard (GresTypes and AccountingStorageTRES then name it)."""
        return any(g.shards for g in self.node_groups)

    def node_port(self, node: str) -> int:
        return self.slurmd_port_base + self.node_names.index(node)

    @property
    def slurmctld_port(self) -> int:
        return self.port_base

    @property
    def slurmdbd_port(self) -> int:
        return self.port_base + 2

    @property
    def mariadb_port(self) -> int:
        return self.port_base + 3


def _field(table: Mapping[str, Any], key: str, kind: type, where: str, default: Any = None) -> Any:
    if key not in table:
        if default is None:
            raise ConfigError(f"{where}: missing required field '{key}'")
        return default
    value = table[key]
    if kind is int and isinstance(value, bool) or not isinstance(value, kind):
        raise ConfigError(f"{where}.{key}: expected {kind.__name__}, got {value!r}")
    return value


def check_known_keys(table: Mapping[str, Any], known: tuple[str, ...], where: str) -> None:
    """ConfigError naming the keys of `table` not in `known`, with the closest known key (a
    typo never passes silently); also used by the simulator's cluster files."""
    if bad := [k for k in table if k not in known]:
        close = difflib.get_close_matches(bad[0], known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"{where}: unknown key(s) {', '.join(map(repr, bad))}{hint}; known: "
                          f"{', '.join(known)}")


def _table(raw: object, where: str, known: tuple[str, ...]) -> Mapping[str, Any]:
    """`raw` as a table with only `known` keys; ConfigError naming `where` otherwise."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected a table, got {raw!r}")
    check_known_keys(raw, known, where)
    return raw


def _positive(value: int, where: str) -> int:
    if value <= 0:
        raise ConfigError(f"{where}: must be positive, got {value}")
    return value


def _node_group(raw: object, where: str) -> NodeGroup:
    raw = _table(raw, where, CLUSTER_NODE_KEYS)
    expr = _field(raw, "name", str, where)
    try:
        names = tuple(hostlist.expand(expr))
    except ValueError as exc:
        raise ConfigError(f"{where}.name: {exc}") from exc
    if not names:
        raise ConfigError(f"{where}.name: names no node")
    gpu_type = _field(raw, "gpu_type", str, where)
    if _GPU_TYPE.fullmatch(gpu_type) is None:
        raise ConfigError(f"{where}.gpu_type: use a lower-case name like 'a100' (or a MIG "
                          f"instance's, 'a100_1g.5gb'), got {gpu_type!r}")
    features = _field(raw, "features", list, where, [gpu_type])
    if not all(isinstance(f, str) and _FEATURE.fullmatch(f) for f in features):
        raise ConfigError(f"{where}.features: expected a list of names of letters, digits, "
                          "'_' and '.'")
    gpus = _positive(_field(raw, "gpus", int, where), f"{where}.gpus")
    mps = _mps(_field(raw, "mps", int, where, 0), f"{where}.mps")
    shards = _mps(_field(raw, "shards", int, where, 0), f"{where}.shards")
    _check_shards(shards, gpus, where)
    return NodeGroup(
        names=names,
        gpu_type=gpu_type,
        gpus=gpus,
        cpus=_positive(_field(raw, "cpus", int, where, 8), f"{where}.cpus"),
        memory_mb=_positive(_field(raw, "memory_mb", int, where, 8000), f"{where}.memory_mb"),
        features=tuple(features),
        mps=mps,
        shards=shards,
    )


def _mps(value: int, where: str) -> int:
    if value < 0:
        raise ConfigError(f"{where}: must be 0 or more, got {value}")
    return value


def _check_shards(shards: int, gpus: int, where: str) -> None:
    """A node's shards: a multiple of its GPUs, which Slurm spreads them evenly over (Slurm
    22.05 takes shards beside mps on one node, and then books both on the same GPU)."""
    if shards % gpus:
        raise ConfigError(f"{where}.shards: the node's shard count (as in Gres=...,shard:N) must "
                          f"be a multiple of its {gpus} GPUs (Slurm spreads it evenly over them), "
                          f"got {shards}")


def parse_spec(data: Mapping[str, Any], source: str = "<spec>") -> ClusterSpec:
    """Validate a decoded TOML document; ConfigError names the file (`source`) and the field."""
    check_known_keys(data, TOP_KEYS, source)
    name = _field(data, "name", str, source, "hase")
    port_base = _field(data, "port_base", int, source, 16817)
    slurmd_base = _field(data, "slurmd_port_base", int, source, 17001)
    for key, port in (("port_base", port_base), ("slurmd_port_base", slurmd_base)):
        if not 1024 <= port <= 65000:
            raise ConfigError(f"{source}.{key}: port {port} outside 1024..65000")
    raw_nodes = _field(data, "nodes", list, source)
    groups = tuple(_node_group(raw, f"{source}: nodes[{i}]") for i, raw in enumerate(raw_nodes))
    all_names = [n for g in groups for n in g.names]
    dupes = sorted({n for n in all_names if all_names.count(n) > 1})
    if dupes:
        raise ConfigError(f"{source}.nodes: node names repeated: {', '.join(dupes)}")
    partitions = []
    for i, raw in enumerate(_field(data, "partitions", list, source, [{"name": "gpu"}])):
        where = f"{source}: partitions[{i}]"
        raw = _table(raw, where, PARTITION_KEYS)
        nodes = raw.get("nodes", "ALL")
        try:  # "ALL", a hostlist or a list of them (the simulator reads the same)
            members = hostlist.members(nodes, all_names)
        except ValueError as exc:
            raise ConfigError(f"{where}.nodes: {exc}") from exc
        partitions.append(PartitionSpec(
            name=_field(raw, "name", str, where),
            nodes="ALL" if nodes == "ALL" else hostlist.compress(members),
            default=_field(raw, "default", bool, where, i == 0) if "default" in raw else i == 0,
        ))
    accounts = []
    for i, raw in enumerate(_field(data, "accounts", list, source, [])):
        where = f"{source}: accounts[{i}]"
        raw = _table(raw, where, ACCOUNT_KEYS)
        users = _field(raw, "users", list, where, ["root"])
        accounts.append(AccountSpec(
            name=_field(raw, "name", str, where),
            shares=_positive(_field(raw, "shares", int, where, 1), f"{where}.shares"),
            users=tuple(str(u) for u in users),
        ))
    scripts = {key: _script(data, key, source) for key in ("prolog", "epilog")}
    return ClusterSpec(name, port_base, slurmd_base, groups, tuple(partitions), tuple(accounts),
                       **scripts, gpu_device_nodes=_field(data, "gpu_device_nodes", bool, source,
                                                          True))


def _script(data: Mapping[str, Any], key: str, source: str) -> str | None:
    """An absolute path without whitespace (slurm.conf reads one word), or None."""
    if key not in data:
        return None
    value: str = _field(data, key, str, source)
    if not value.startswith("/") or any(c.isspace() for c in value):
        raise ConfigError(f"{source}.{key}: expected an absolute path without whitespace, "
                          f"got {value!r}")
    return value


def load_spec(path: str | Path | None = None) -> ClusterSpec:
    """Read a spec file; None means the packaged default cluster."""
    if path is None:
        text = resources.files(__package__).joinpath("default_cluster.toml").read_text()
        source = "default_cluster.toml"
    else:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read cluster spec {path}: {exc.strerror}") from exc
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path}: {not_utf8(exc)}") from None
        source = str(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from exc
    return parse_spec(data, source)
