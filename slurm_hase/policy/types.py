"""Inputs and outputs of every scheduling policy. Pure data: no Slurm, no clock, no I/O.

The daemon builds a ClusterState from Slurm (via the backend) and the simulator builds one from
its in-memory cluster; both call the same Policy.decide and apply the same Decisions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True, slots=True)
class GpuPool:
    """All GPUs of one type that the managed partitions hold."""

    gpu_type: str  # canonical lower-case type, as in node Features / GRES (a100, v100, t4)
    total_gpus: int
    free_gpus: int  # whole GPUs idle now
    nodes: int = 1
    gpus_per_node: int = 4
    mps_capacity: int = 100  # MPS share units per GPU (Slurm's mps:N / GPUs)
    # the part of a physical GPU one GPU of this type is: 1/7 for a MIG 1g instance of an A100
    # (predict/mig.py); entitlements count capacity and held GPUs in these parts
    gpu_share: float = 1.0

    @property
    def idle_gpus(self) -> int:
        """Whole GPUs idle now, within 0..total_gpus whatever the backend reported."""
        return max(0, min(self.free_gpus, self.total_gpus))


@dataclass(frozen=True, slots=True)
class PendingJob:
    """A job waiting to start, with what the predictor says about it."""

    job_id: str
    account: str
    user: str
    submit_time: float
    num_gpus: int
    # Predicted exclusive runtime (s) of the whole job on each GPU type it can use.
    runtime_s: Mapping[str, float]
    gpu_fraction: float = 1.0  # < 1.0 for an MPS share (e.g. --gres=mps:50 -> 0.5)
    # Multiplier on runtime when sharing a GPU through MPS, per type (>= 1.0); empty = 1.0.
    mps_slowdown: Mapping[str, float] = field(default_factory=dict)
    # Type the user pinned (--gpus=a100:1); policies never change it. None = untyped.
    pinned_type: str | None = None
    nice: int = 0  # current Nice in policy units: Slurm's / nice_scale + nice_zero (daemon)
    features: str = ""  # constraint currently on the job
    memory_gb: float = 0.0  # GPU memory the job needs per GPU (0 = unknown)
    # It opted in to checkpoint + requeue (descriptor checkpoint=yes and Slurm may requeue it)
    preemptible: bool = False
    restarts: int = 0  # times it has been requeued (Slurm's Restarts)
    # It opted in to sharing (descriptor share=yes), asks one whole untyped GPU per node, and
    # Slurm can turn it into an MPS share while it waits (24.11 or later): Decision.mps_share
    may_share: bool = False


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job holding GPUs now."""

    job_id: str
    account: str
    user: str
    gpu_type: str
    num_gpus: int
    start_time: float
    expected_end: float  # predicted (or time-limit) end, epoch seconds
    gpu_fraction: float = 1.0
    # Normalised speed here: predicted rate on this type / rate on its best type (0..1].
    relative_speed: float = 1.0
    # Opted in to checkpoint + requeue (descriptor checkpoint=yes and Slurm may requeue it).
    preemptible: bool = False
    # Predicted runtime of the whole job on each GPU type (as for PendingJob); may be empty.
    runtime_s: Mapping[str, float] = field(default_factory=dict)
    restarts: int = 0  # times it was requeued so far


@dataclass(frozen=True)
class ClusterState:
    """Everything a policy may look at. `now` comes from the caller's clock."""

    now: float
    pools: Mapping[str, GpuPool]
    pending: Sequence[PendingJob]
    running: Sequence[RunningJob]
    # Entitlement weights (sacctmgr shares or config); accounts missing here weigh 1.0.
    shares: Mapping[str, float] = field(default_factory=dict)
    # Decayed normalised GPU service each account has received (GPU-seconds * fraction * speed).
    usage: Mapping[str, float] = field(default_factory=dict)
    # How many jobs of Slurm's priority order its scheduling passes look at (bf_max_job_test,
    # default_queue_depth: the larger); 0 = not known.
    scheduler_depth: int = 0


@dataclass(frozen=True)
class Decision:
    """What a policy wants for one pending job. None = leave that attribute alone."""

    job_id: str
    nice: int | None = None
    # Allowed GPU types, best first; becomes the job's Features constraint ("a100|v100").
    gpu_types: tuple[str, ...] | None = None
    reason: str = ""
    # For a running, preemptible job: requeue it (it checkpoints and waits again) so the GPUs
    # go to the pending jobs ahead of it in the fair order.
    requeue: bool = False
    # For a pending job that may share (PendingJob.may_share): ask this many MPS units of one
    # GPU instead of the whole GPU (GpuPool.mps_capacity // 2 = half), policy/pairing.py.
    mps_share: int | None = None


class Policy(Protocol):
    """A scheduling policy: state in, decisions out. Must be pure and deterministic."""

    @property
    def name(self) -> str: ...

    @property
    def summary(self) -> str: ...

    def decide(self, state: ClusterState) -> list[Decision]: ...


def is_passive(policy: Policy) -> bool:
    """True for a policy that returns no decision for any state (FifoPolicy): running its cycle
    changes nothing, so a caller may skip it. Policies say so with `passive = True`."""
    return bool(getattr(policy, "passive", False))
