"""What `hase cluster status` reports, and why a cluster is not ready, in words."""

from __future__ import annotations

from dataclasses import dataclass, field

READY_STATES = {"IDLE", "MIXED", "ALLOCATED", "COMPLETING", "PLANNED"}  # PLANNED: 23.02+ backfill


def expected_services(node_names: list[str]) -> tuple[str, ...]:
    """The daemons a running cluster of these nodes has (pids.json's names)."""
    return ("munged", "mariadb", "slurmdbd", "slurmctld", *(f"slurmd-{n}" for n in node_names))


@dataclass
class ClusterStatus:
    """What `hase cluster status` reports."""

    root: str
    slurm_conf: str
    processes: dict[str, int] = field(default_factory=dict)
    node_states: dict[str, str] = field(default_factory=dict)
    accounting: bool = False
    expected_nodes: int = 0
    expected_processes: tuple[str, ...] = ()

    @property
    def missing(self) -> list[str]:
        """Daemons the cluster needs that do not run (a slurmd killed: slurmctld still lists
        its node IDLE until SlurmdTimeout)."""
        return sorted(set(self.expected_processes) - set(self.processes))

    @property
    def ready(self) -> bool:
        return (self.accounting and not self.missing
                and len(self.node_states) == self.expected_nodes
                and all(s in READY_STATES for s in self.node_states.values()))


def not_ready_text(status: ClusterStatus, node_names: list[str]) -> str:
    """What keeps the cluster from being ready, in words an admin can act on."""
    parts = []
    if status.missing:
        parts.append(f"  not running: {', '.join(status.missing)} (see log/<name>.out)")
    if not status.accounting:
        parts.append("  sacct does not answer yet (slurmdbd: see log/slurmdbd.log)")
        return "\n".join(parts)
    stuck = {n: s for n, s in status.node_states.items()  # a node without its slurmd: above
             if s not in READY_STATES and f"slurmd-{n}" not in status.missing}
    missing = sorted(set(node_names) - set(status.node_states))
    if stuck:
        parts.append(f"  nodes not ready: {', '.join(f'{n} {s}' for n, s in sorted(stuck.items()))}"
                     f" (resume with: scontrol update nodename={','.join(sorted(stuck))} "
                     "state=resume)")
    if missing:
        parts.append(f"  nodes slurmctld does not list: {', '.join(missing)}")
    return "\n".join(parts) or "  every node is ready now: run 'hase cluster up' again"
