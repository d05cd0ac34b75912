"""Typed views of Slurm objects, the same for every Slurm version and backend."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class JobState(StrEnum):
    """Base job states (Slurm's flags such as REQUEUED are dropped)."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETING = "COMPLETING"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    PREEMPTED = "PREEMPTED"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    REQUEUED = "REQUEUED"
    OTHER = "OTHER"

    @classmethod
    def parse(cls, text: str) -> JobState:
        """Map Slurm's text ("CANCELLED by 0", "PENDING") to a state; unknown -> OTHER."""
        head = text.strip().split(" ")[0].upper() if text else ""
        try:
            return cls(head)
        except ValueError:
            return cls.OTHER

    @classmethod
    def parse_live(cls, text: str) -> JobState:
        """A live job's state as squeue/scontrol print it. Slurm's job_state_string names a set
        flag instead of the base state (scontrol's JobState=, 22.05's squeue --json): a running
        job whose nodes boot is CONFIGURING, a held requeued one REQUEUE_HOLD (squeue(1), JOB
        STATE CODES). The flags that imply one base state are read as that state."""
        head = text.strip().split(" ")[0].upper() if text else ""
        return _LIVE_FLAG_BASE.get(head) or cls.parse(head)


# job_state_string's flag names whose base state is known: CONFIGURING, RESIZING and STOPPED are
# set on a job with an allocation (RUNNING); REQUEUE_HOLD, SPECIAL_EXIT, RESV_DEL_HOLD and
# REQUEUE_FED on a job back in the queue (PENDING). COMPLETING and REQUEUED have their own
# member; SIGNALING, STAGE_OUT and REVOKED stay OTHER (no one base state).
_LIVE_FLAG_BASE = {
    "CONFIGURING": JobState.RUNNING, "RESIZING": JobState.RUNNING, "STOPPED": JobState.RUNNING,
    "REQUEUE_HOLD": JobState.PENDING, "SPECIAL_EXIT": JobState.PENDING,
    "RESV_DEL_HOLD": JobState.PENDING, "REQUEUE_FED": JobState.PENDING,
}


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """What a job asks of GPUs: count, optional type, where it was asked, MPS share."""

    count: int
    gpu_type: str | None
    scope: str  # "job" (--gpus, TresPerJob) or "node" (--gres, TresPerNode)
    mps: int = 0  # MPS units per node (gres/mps=N; the node's count per GPU makes one GPU), 0 if none

    @property
    def typed(self) -> bool:
        return self.gpu_type is not None


@dataclass(frozen=True)
class Job:
    """A job as slurmctld sees it (squeue / scontrol)."""

    job_id: str
    name: str
    user: str
    account: str
    partition: str
    state: JobState
    reason: str = ""
    priority: int = 0
    nice: int = 0
    features: str = ""
    # --prefer: features Slurm tries first; where they can be met it runs the job there in
    # place of `features` (22.05 then shows Features=the preference, Prefer empty)
    prefer: str = ""
    tres_per_job: str = ""
    tres_per_node: str = ""
    gpu: GpuRequest | None = None
    alloc_gpus: dict[str, int] = field(default_factory=dict)  # type -> count ("" if untyped)
    nodes: str = ""
    comment: str = ""
    submit_time: int | None = None  # epoch seconds
    # pending: the time it may start from (its --begin, or 121 s after a requeue with Slurm's
    # default cred_expire); running or ended: when it became eligible
    eligible_time: int | None = None
    start_time: int | None = None
    end_time: int | None = None
    time_limit_s: int | None = None  # None = unlimited
    held: bool = False
    array_job_id: str | None = None
    array_task_id: str | None = None
    requeue: bool = False  # Slurm may requeue it (--requeue or JobRequeue=1)
    restarts: int = 0  # times it was requeued so far

    @property
    def pending(self) -> bool:
        return self.state is JobState.PENDING

    @property
    def address(self) -> str:
        """The id that names this one job to scontrol/scancel: ARRAY_TASK for an array task
        (the task that started last has the array's own id as JobId, and that bare id names
        every task of the array: ``scontrol requeue 1963`` requeued them all), ARRAY_[TASKS]
        for an array's pending tasks (``1963_[3-9]``: the bare id would also update its running
        tasks, refusing Features on them with exit 1), else JobId. A task list squeue cut
        short (``...``) keeps the bare id."""
        task = self.array_task_id
        if not self.array_job_id or not task:
            return self.job_id
        if task.isdigit():
            return f"{self.array_job_id}_{task}"
        tasks = task.split("%", 1)[0].strip("[]")  # "3-9%2": at most 2 running at once
        if tasks and "." not in tasks and all(c.isdigit() or c in ",-:" for c in tasks):
            return f"{self.array_job_id}_[{tasks}]"
        return self.job_id


# Node states and flags that make a node unusable for new work.
_UNUSABLE = frozenset({"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "INVAL", "NOT_RESPONDING",
                       "UNKNOWN"})


@dataclass(frozen=True, slots=True)
class Node:
    """A compute node with its GPUs by type."""

    name: str
    state: str  # base state, upper case: IDLE, MIXED, ALLOCATED, DOWN, DRAINED...
    state_flags: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    gpus: dict[str, int] = field(default_factory=dict)  # type -> configured count
    gpus_alloc: dict[str, int] = field(default_factory=dict)  # type -> allocated count
    mps_total: int = 0
    mps_alloc: int = 0
    shard_total: int = 0  # gres/shard of the node (Slurm >= 22.05)
    cpus: int = 0
    cpus_alloc: int = 0
    # its Gres has GPUs but its CfgTRES none: AccountingStorageTRES lacks gres/gpu, and then
    # AllocTRES never shows its GPUs in use (gpus_alloc reads 0 however busy it is)
    gpus_untracked: bool = False

    @property
    def usable(self) -> bool:
        return self.state not in _UNUSABLE and _UNUSABLE.isdisjoint(self.state_flags)


@dataclass(frozen=True)
class Partition:
    """A partition and its nodes."""

    name: str
    nodes: tuple[str, ...] = ()
    default: bool = False
    state: str = "UP"


@dataclass(frozen=True)
class AccountingRecord:
    """One job (allocation line) from sacct."""

    job_id: str
    name: str
    account: str
    user: str
    state: JobState
    exit_code: str = ""
    partition: str = ""
    submit_time: int | None = None
    start_time: int | None = None
    end_time: int | None = None
    elapsed_s: int = 0
    req_tres: dict[str, str] = field(default_factory=dict)
    alloc_tres: dict[str, str] = field(default_factory=dict)
    alloc_gpus: dict[str, int] = field(default_factory=dict)  # type -> count
    constraints: str = ""
    nodes: str = ""
    comment: str = ""
    # when the job could first start (submit, or --begin, or the release of a hold); None when
    # it never could (held and never released) or the source does not say
    eligible_time: int | None = None


@dataclass(frozen=True)
class JobUpdate:
    """Changes to a pending job; None leaves a field as it is."""

    nice: int | None = None
    features: str | None = None  # "" clears
    tres_per_job: str | None = None
    tres_per_node: str | None = None
    comment: str | None = None

    def is_empty(self) -> bool:
        return all(v is None for v in (self.nice, self.features, self.tres_per_job,
                                       self.tres_per_node, self.comment))


@dataclass(frozen=True)
class SchedulerDepths:
    """How many jobs of the priority-ordered queue slurmctld looks at (SchedulerParameters)."""

    backfill: int = 500  # bf_max_job_test per backfill pass (0: SchedulerType is not backfill)
    main: int = 100  # default_queue_depth per event-triggered main pass

    @property
    def deepest(self) -> int:
        """The furthest position in the priority order either pass reaches."""
        return max(self.backfill, self.main)
