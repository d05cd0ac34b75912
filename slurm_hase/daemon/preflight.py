"""Preflight: the daemon's config checked against what Slurm reports, once at start.

A config can be valid on its own and still steer nothing: `partitions = ["gpux"]` where the
cluster has `gpu` makes every cycle see 0 pending jobs. `check_config` (pure) compares a
DaemonConfig with `ClusterFacts` (partitions with their nodes' GPU types, accounts) and returns
the problems it finds: fatal when nothing the daemon is told to manage exists, warnings for
parts of the config that name nothing. `observe_facts` asks a backend for those facts.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from slurm_hase.daemon.config import DaemonConfig
from slurm_hase.errors import SlurmError
from slurm_hase.slurm.backend import SlurmBackend
from slurm_hase.slurm.types import Node, Partition

log = logging.getLogger("slurm_hase.daemon")


@dataclass(frozen=True)
class ClusterFacts:
    """What Slurm reports that the config refers to.

    `partitions` maps each partition name to the GPU types (lower case) of its nodes;
    `accounts` is None when the accounts were not read (nothing to compare shares with).
    """

    partitions: Mapping[str, frozenset[str]]
    accounts: frozenset[str] | None = None
    # partitions with a node whose GPUs have no type (Gres=gpu:4): GPUs the daemon cannot steer
    untyped: frozenset[str] = frozenset()
    # GPU nodes whose CfgTRES has no gres/gpu: Slurm never reports their GPUs in use
    untracked: tuple[str, ...] = ()

    @property
    def gpu_types(self) -> frozenset[str]:
        """Every GPU type on any node of any partition."""
        return _union(self.partitions.values())


@dataclass(frozen=True)
class Problem:
    """One mismatch between config and cluster; `fatal` ones stop the daemon from starting."""

    fatal: bool
    message: str

    def __str__(self) -> str:
        return self.message


def cluster_facts(nodes: Sequence[Node], partitions: Sequence[Partition],
                  accounts: Iterable[str] | None = None) -> ClusterFacts:
    """Facts from the backend's nodes and partitions (a node belongs to a partition when
    either lists the other; all nodes count, whatever their state)."""
    types: dict[str, set[str]] = {p.name: set() for p in partitions}
    members = {p.name: set(p.nodes) for p in partitions}
    untyped: set[str] = set()
    for node in nodes:
        node_types = {t.lower() for t, n in node.gpus.items() if t and n > 0}
        parts = set(node.partitions) | {p for p, ns in members.items() if node.name in ns}
        for part in parts:
            types.setdefault(part, set()).update(node_types)
        if node.gpus.get("", 0) > 0:
            untyped |= parts
    return ClusterFacts({p: frozenset(t) for p, t in types.items()},
                        None if accounts is None else frozenset(accounts), frozenset(untyped),
                        tuple(sorted(n.name for n in nodes if n.gpus_untracked)))


def _union(sets: Iterable[frozenset[str]]) -> frozenset[str]:
    out: set[str] = set()
    for s in sets:
        out |= s
    return frozenset(out)


def _names(items: Iterable[str]) -> str:
    return ", ".join(sorted(items)) or "none"


def check_config(cfg: DaemonConfig, facts: ClusterFacts) -> list[Problem]:
    """Problems of `cfg` on the cluster `facts` describes, fatal ones first.

    Fatal: none of the configured partitions exists; GPU nodes whose GPUs Slurm does not count
    as TRES (their use would read as nothing). Warnings: some configured partitions
    do not exist; configured partitions without GPU nodes, or whose GPUs have no type (so
    nothing there can be steered); configured gpu_types with no
    nodes in the managed partitions; shares for accounts Slurm does not report.
    """
    fatal: list[Problem] = []
    warn: list[Problem] = []
    if facts.untracked:
        shown = ", ".join(facts.untracked[:3]) + (", ..." if len(facts.untracked) > 3 else "")
        fatal.append(Problem(True, (
            f"Slurm does not count GPUs as TRES: node {shown} has GPUs in Gres but no gres/gpu "
            "in CfgTRES, so its AllocTRES never shows a GPU in use and the daemon would take "
            "every GPU for free; add gres/gpu (and gres/gpu:TYPE for each type, gres/mps) to "
            "AccountingStorageTRES in slurm.conf and restart slurmctld (docs/install.md)")))
    managed = set(facts.partitions)
    if cfg.partitions is not None:
        wanted = list(dict.fromkeys(cfg.partitions))
        missing = [p for p in wanted if p not in facts.partitions]
        managed = {p for p in wanted if p in facts.partitions}
        if not managed:
            fatal.append(Problem(True, (
                f"[schedd] partitions: none of the configured partitions ({', '.join(wanted)}) "
                f"exists in Slurm (Slurm's partitions: {_names(facts.partitions)}); "
                "the daemon would manage no job")))
        elif missing:
            warn.append(Problem(False, (
                f"[schedd] partitions: {', '.join(missing)} not in Slurm (Slurm's partitions: "
                f"{_names(facts.partitions)}); managing {_names(managed)} only")))
        no_types = [p for p in wanted if p in managed and not facts.partitions[p]]
        untyped = [p for p in no_types if p in facts.untyped]
        no_gpu = [p for p in no_types if p not in facts.untyped]
        if no_gpu:
            warn.append(Problem(False, (
                f"[schedd] partitions: {', '.join(no_gpu)} "
                f"{'have' if len(no_gpu) > 1 else 'has'} no GPU nodes; the daemon steers "
                "nothing there")))
        if untyped:
            warn.append(Problem(False, (
                f"[schedd] partitions: the GPUs of {', '.join(untyped)} have no type "
                "(Gres=gpu:N, not gpu:TYPE:N); the daemon steers nothing there until the "
                "nodes' Gres and Features name it (docs/install.md, step 2)")))
    if cfg.gpu_types is not None and managed:
        present = _union(facts.partitions[p] for p in managed)
        absent = [t for t in dict.fromkeys(cfg.gpu_types) if t not in present]
        if absent:
            where = ("any partition" if cfg.partitions is None else
                     f"partition{'s' if len(managed) > 1 else ''} {_names(managed)}")
            warn.append(Problem(False, (
                f"[schedd] gpu_types: no node in {where} has {', '.join(absent)} "
                f"(GPU types there: {_names(present)})")))
    if cfg.shares and facts.accounts is not None:
        unknown = sorted(a for a in cfg.shares if a not in facts.accounts)
        if unknown:
            warn.append(Problem(False, (
                f"[shares] {', '.join(unknown)}: not an account in Slurm's associations "
                f"(accounts: {_names(facts.accounts)}); the share is never used")))
    return fatal + warn


def observe_facts(backend: SlurmBackend, cfg: DaemonConfig) -> ClusterFacts:
    """Ask Slurm for the facts `check_config` needs. Raises SlurmError when slurmctld does not
    answer; accounts are read only when `cfg` sets shares, and left unknown (logged) when
    sacctmgr fails, so the partition checks still run."""
    nodes, partitions = backend.nodes(), backend.partitions()
    accounts: Iterable[str] | None = None
    if cfg.shares:
        try:
            accounts = backend.accounts()
        except SlurmError as exc:
            log.warning("preflight: cannot read accounts (%s); [shares] not checked", exc)
    return cluster_facts(nodes, partitions, accounts)


def run_preflight(backend: SlurmBackend, cfg: DaemonConfig) -> list[Problem]:
    """`check_config` on what `backend` reports now, warnings logged. Slurm unreachable: the
    check is skipped (logged) and no problem returned; the loop's back-off handles that."""
    try:
        facts = observe_facts(backend, cfg)
    except SlurmError as exc:
        log.warning("preflight check skipped: Slurm did not answer (%s)", exc)
        return []
    problems = check_config(cfg, facts)
    for p in problems:
        if not p.fatal:
            log.warning("preflight: %s", p.message)
    return problems
