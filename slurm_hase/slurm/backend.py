"""The Slurm backend interface. CommandBackend (commands.py + parsers) implements it today;
a pyslurm backend or the simulator's in-memory Slurm implement the same Protocol."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from slurm_hase.slurm.types import (
    AccountingRecord,
    Job,
    JobUpdate,
    Node,
    Partition,
    SchedulerDepths,
)


class SlurmBackend(Protocol):
    """Everything slurm-hase asks of Slurm."""

    def version(self) -> str: ...

    def jobs(self) -> list[Job]: ...

    def job(self, job_id: str) -> Job:
        """One job as Slurm knows it now; JobNotFoundError once it has forgotten it."""
        ...

    def nodes(self) -> list[Node]: ...

    def partitions(self) -> list[Partition]: ...

    def accounting(
        self, *, since: str = "now-1day", until: str = "now", job_ids: Sequence[str] = ()
    ) -> list[AccountingRecord]: ...

    def account_shares(self) -> dict[str, float]: ...

    def accounts(self) -> set[str]:
        """The accounts of this cluster's associations, root too (which account_shares() leaves
        out, as it does an account whose fairshare is `parent` and that has no users of its
        own)."""
        ...

    def scheduler_depths(self) -> SchedulerDepths: ...

    def submit(self, args: Sequence[str], script: str | None = None) -> str: ...

    def update_job(self, job_id: str, update: JobUpdate) -> None: ...

    def hold(self, job_id: str) -> None: ...

    def release(self, job_id: str) -> None: ...

    def requeue(self, job_id: str) -> None: ...

    def cancel(self, job_id: str) -> None: ...
