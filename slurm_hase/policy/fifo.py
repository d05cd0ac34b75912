"""FIFO baseline: no decisions at all, so Slurm runs as configured (multifactor + backfill).

This is the incumbent every other policy is measured against.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from slurm_hase.policy.types import ClusterState, Decision


@dataclass
class FifoPolicy:
    """Leaves every job alone."""

    name: str = field(default="fifo", init=False)
    summary: str = field(default="no changes: Slurm multifactor priority + backfill as configured", init=False)
    # Decides nothing whatever the state: a caller that only acts on decisions (the
    # simulator) may skip building the state for it (policy.types.is_passive).
    passive: bool = field(default=True, init=False)

    def decide(self, state: ClusterState) -> list[Decision]:
        """Always the empty list."""
        return []
