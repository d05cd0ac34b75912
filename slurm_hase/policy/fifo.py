"""FIFO baseline: no decisions at all, so Slurm runs as configured (multifactor + backfill).

This is the incumbent every other policy is measured against.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_hase.policy.types import ClusterState, Decision


@dataclass
class FifoPolicy:
    """Leaves every job alone."""

    @property
    def name(self) -> str:
        return "fifo"

    @property
    def summary(self) -> str:
        return "no changes: Slurm multifactor priority + backfill as configured"

    @property
    def passive(self) -> bool:
        """Decides nothing whatever the state: a caller that only acts on decisions (the
        simulator) may skip building the state for it (policy.types.is_passive)."""
        return True

    def decide(self, state: ClusterState) -> list[Decision]:
        """Always the empty list."""
        return []
