"""A tiny scripted SlurmBackend for tests and dry demos of the daemon (not the simulator's).

Jobs and nodes are plain lists; update_job applies Nice/Features to the stored job so a
second cycle sees the result. Faults are injected with `fail_updates` and `unavailable`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import replace

from slurm_hase.errors import (
    JobNotFoundError,
    SlurmCommandError,
    SlurmError,
    SlurmUnavailableError,
)
from slurm_hase.slurm.types import (
    AccountingRecord,
    Job,
    JobState,
    JobUpdate,
    Node,
    Partition,
    SchedulerDepths,
)


class FakeBackend:
    """In-memory jobs/nodes with a log of every update call."""

    def __init__(self, jobs: Sequence[Job] = (), nodes: Sequence[Node] = (),
                 shares: dict[str, float] | None = None) -> None:
        self.job_list: list[Job] = list(jobs)
        self.node_list: list[Node] = list(nodes)
        self.shares = dict(shares or {})
        # what accounts() returns (None: root and the accounts of `shares`)
        self.account_names: set[str] | None = None
        self.records: list[AccountingRecord] = []  # what accounting() returns
        self.updates: list[tuple[str, JobUpdate]] = []
        self.requeued: list[str] = []  # job ids requeue() was applied to
        self.fail_updates: dict[str, SlurmError] = {}  # job id -> error raised by update_job
        self.unavailable = False  # every call raises SlurmUnavailableError
        self.accounting_down = False  # sacct fails as with slurmdbd down (slurmctld answers)
        self.before_update: Callable[[str], None] | None = None  # hook: mutate between observe/act
        self.calls = 0
        self._index: dict[str, int] = {}
        self._lock = threading.RLock()
        self.accepts_lists = False  # like scontrol's jobid=1,2,3 (all-or-error here)
        self.depths = SchedulerDepths()  # Slurm's defaults
        self.slurm_version = "fake-0"  # what version() says (slurm/tres.py reads gres updates off it)

    def _check(self, what: str) -> None:
        self.calls += 1
        if self.unavailable:
            raise SlurmUnavailableError([what], 1, "Unable to contact slurm controller (connect failure)")

    def version(self) -> str:
        self._check("version")
        return self.slurm_version

    def jobs(self) -> list[Job]:
        self._check("squeue")
        return list(self.job_list)

    def job(self, job_id: str) -> Job:
        self._check("scontrol")
        with self._lock:
            for job in self.job_list:
                if job.job_id == job_id:
                    return job
        raise JobNotFoundError(job_id)

    def nodes(self) -> list[Node]:
        self._check("sinfo")
        return list(self.node_list)

    def partitions(self) -> list[Partition]:
        self._check("sinfo")
        names = sorted({p for n in self.node_list for p in n.partitions})
        return [Partition(p, tuple(n.name for n in self.node_list if p in n.partitions))
                for p in names]

    def accounting(self, *, since: str = "now-1day", until: str = "now",
                   job_ids: Sequence[str] = ()) -> list[AccountingRecord]:
        self._check("sacct")
        if self.accounting_down:
            raise SlurmCommandError(["sacct"], 1, "sacct: error: Problem talking to the database: "
                                                   "Connection refused")
        return list(self.records)

    def account_shares(self) -> dict[str, float]:
        self._check("sshare")
        return dict(self.shares)

    def accounts(self) -> set[str]:
        self._check("sacctmgr")
        if self.accounting_down:
            raise SlurmCommandError(["sacctmgr"], 1, "sacctmgr: error: Problem talking to the "
                                                      "database: Connection refused")
        return set(self.account_names) if self.account_names is not None else {"root", *self.shares}

    def scheduler_depths(self) -> SchedulerDepths:
        self._check("scontrol")
        return self.depths

    def submit(self, args: Sequence[str], script: str | None = None) -> str:
        raise NotImplementedError("FakeBackend does not submit")

    def update_job(self, job_id: str, update: JobUpdate) -> None:
        with self._lock:
            if self.before_update is not None:
                self.before_update(job_id)
            self._check("scontrol")
            if "," in job_id and self.accepts_lists:
                for one in job_id.split(","):
                    self._update(one, update)
            else:
                self._update(job_id, update)

    def _update(self, job_id: str, update: JobUpdate) -> None:
        if job_id in self.fail_updates:
            raise self.fail_updates[job_id]
        index = {j.job_id: i for i, j in enumerate(self.job_list)} if len(
            self._index) != len(self.job_list) else self._index
        self._index = index
        i = index.get(job_id, -1)
        if i < 0 or i >= len(self.job_list) or self.job_list[i].job_id != job_id:
            self._index = {}
            if job_id not in {j.job_id for j in self.job_list}:
                raise JobNotFoundError(job_id)
            return self._update(job_id, update)
        job = self.job_list[i]
        self.updates.append((job_id, update))
        self.job_list[i] = replace(
            job,
            nice=job.nice if update.nice is None else update.nice,
            features=job.features if update.features is None else update.features,
        )

    def hold(self, job_id: str) -> None:
        self._check("scontrol")

    def release(self, job_id: str) -> None:
        self._check("scontrol")

    def requeue(self, job_id: str) -> None:
        """Like scontrol requeue on 22.05 and 24.11: a running job, and also one that has
        finished or was cancelled (still known), goes back to PENDING (Restarts + 1); a pending
        one is refused with Slurm's message."""
        with self._lock:
            self._check("scontrol")
            for i, job in enumerate(self.job_list):
                if job.job_id == job_id:
                    if job.state is JobState.PENDING:
                        raise SlurmCommandError(["scontrol", "requeue", job_id], 1,
                                                f"Job is pending execution for job {job_id}")
                    self.requeued.append(job_id)
                    self.job_list[i] = replace(job, state=JobState.PENDING, alloc_gpus={},
                                               start_time=None, restarts=job.restarts + 1)
                    return
            raise JobNotFoundError(job_id)

    def cancel(self, job_id: str) -> None:
        self._check("scancel")
        with self._lock:
            self.job_list = [j for j in self.job_list if j.job_id != job_id]


def gpu_node(name: str, gpu_type: str, gpus: int = 4, *, partition: str = "gpu",
             alloc: int = 0, features: tuple[str, ...] | None = None, state: str = "IDLE",
             mps: int = 0) -> Node:
    """A node with `gpus` GPUs of one type whose Features name the type."""
    return Node(name=name, state=state, features=features if features is not None else (gpu_type,),
                partitions=(partition,), gpus={gpu_type: gpus}, gpus_alloc={gpu_type: alloc},
                mps_total=mps, cpus=32)
