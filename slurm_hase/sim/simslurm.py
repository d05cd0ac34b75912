"""SimSlurm: an in-memory slurmctld implementing the SlurmBackend Protocol.

The state and job lifecycle are SimCluster's (simcluster.py); this adds what the daemon sees and
does through the protocol. Views (`jobs()`, `nodes()`) are cached Job/Node objects rebuilt
only when a job or node changes.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import cached_property

from slurm_hase.daemon.records import mps_per_gpu
from slurm_hase.errors import JobNotFoundError, SlurmCommandError
from slurm_hase.policy.common import parse_features
from slurm_hase.sim.cluster import JOB_PARTITION
from slurm_hase.sim.simcluster import PendingQueue, SharedGpu, SimCluster, SimJob
from slurm_hase.slurm.tres import gpu_request
from slurm_hase.slurm.types import (
    AccountingRecord,
    GpuRequest,
    Job,
    JobState,
    JobUpdate,
    Node,
    Partition,
    SchedulerDepths,
)

__all__ = ["PARTITION", "PendingQueue", "SharedGpu", "SimJob", "SimSlurm"]

PARTITION = JOB_PARTITION  # every trace job is submitted here (cluster.py: it holds every node)


class SimSlurm(SimCluster):
    """The simulated Slurm controller (see module doc)."""


    def version(self) -> str:
        return "sim-24.11"

    def jobs(self) -> list[Job]:
        fresh = self._fresh_view
        return ([v if (v := j.view) is not None else fresh(j) for j in self.pending.values()]
                + [v if (v := j.view) is not None else fresh(j) for j in self.running.values()])

    def job(self, job_id: str) -> Job:
        """A pending or running job's view; JobNotFoundError for any other id."""
        job = self.pending.get(job_id) or self.running.get(job_id)
        if job is None:
            raise JobNotFoundError(job_id)
        return job.view if job.view is not None else self._fresh_view(job)

    def _fresh_view(self, job: SimJob) -> Job:
        prev = job.last_view
        if (prev is not None and job.state is JobState.PENDING and prev.state is job.state
                and prev.restarts == job.restarts and prev.gpu is job.req
                and job.req is not None and job.req.gpu_type == job.pinned
                and prev.comment == job.comment and prev.time_limit_s == int(job.time_limit)):
            # a pending job whose reason, priority, Nice, Features or hold changed: the same
            # view as _view would build, copied with those fields (~5x cheaper, every cycle
            # rebuilds hundreds of them as priorities and reasons move)
            view = object.__new__(Job)
            fields = view.__dict__
            fields.update(prev.__dict__)
            fields.update(reason=job.reason, priority=job.priority, nice=job.nice,
                          features=job.features, held=job.held)
        else:
            view = self._view(job)
        job.view = job.last_view = view
        return view

    def _view(self, job: SimJob) -> Job:
        tj = job.trace
        req = job.req
        if req is None or req.gpu_type != job.pinned:
            if job.frac < 1.0:
                req = GpuRequest(0, job.pinned, "node", self._mps_count(job.frac,
                                                                        job.pinned))
            elif tj.may_share:  # submitted as --gres=gpu:1, the request a share replaces
                req = GpuRequest(1, job.pinned, "node")
            else:
                req = GpuRequest(tj.num_gpus, job.pinned, "job")
            job.req = req
        running = job.state is JobState.RUNNING
        if running and job.frac < 1.0:
            # it holds its trace's fraction of a GPU of the type it runs on: in that type's units
            # (the pending request's units differ where the types' MPS counts do)
            mps = self._mps_count(job.frac, job.gpu_type)
            req = req if mps == req.mps else GpuRequest(0, job.pinned, "node", mps)
        if job.frac < 1.0:
            tres = f"gres/mps:{req.mps}"
        else:
            tres = f"gres/gpu:{job.pinned + ':' if job.pinned else ''}{tj.num_gpus}"
        return Job(
            job_id=tj.job_id, name=tj.workload, user=tj.user, account=tj.account,
            partition=PARTITION, state=job.state, reason="None" if running else job.reason,
            priority=job.priority, nice=job.nice, features=job.features,
            tres_per_job=tres if req.scope == "job" else "",
            tres_per_node=tres if req.scope == "node" else "", gpu=req,
            alloc_gpus={job.gpu_type: max(tj.num_gpus, 1)} if running else {},
            nodes=",".join(self.nodes_spec[i].name for i, _ in job.alloc) if running else "",
            submit_time=int(job.requeued_at if job.restarts else tj.submit_s), start_time=int(job.start) if running else None,
            time_limit_s=int(job.time_limit), held=job.held,
            comment=job.comment, requeue=True, restarts=job.restarts,
        )

    @cached_property
    def _mps_units(self) -> tuple[dict[str, int], tuple[str, ...]]:
        """(GPU type -> MPS units per GPU of its nodes, the types of the nodes of PARTITION, or
        all types when none is in it), as the daemon's state reads them off nodes()."""
        acc: dict[str, tuple[int, int]] = {}
        for n in self.nodes_spec:
            units, gpus = acc.get(n.gpu_type, (0, 0))
            acc[n.gpu_type] = (units + n.mps * n.gpus, gpus + n.gpus)
        held = tuple(dict.fromkeys(n.gpu_type for n in self.nodes_spec
                                   if PARTITION in n.partitions))
        return ({t: max(u // g, 1) for t, (u, g) in acc.items()},
                held or tuple(self.type_order))

    def _mps_count(self, fraction: float, pinned: str | None) -> int:
        """The gres/mps count of `fraction` of one GPU, in the MPS units per GPU the daemon's
        records read the job's request by (records.mps_per_gpu): Slurm's count per GPU is the
        node's (Gres=gpu:4,mps:800 is 200 per GPU), 100 on a cluster without `mps`."""
        units, types = self._mps_units
        return int(round(fraction * mps_per_gpu(units, pinned, types)))

    def nodes(self) -> list[Node]:
        out = []
        for i, spec in enumerate(self.nodes_spec):
            view = self._node_views[i]
            if view is None:
                used = spec.gpus - self.node_free[i]
                state = "IDLE" if used == 0 else ("ALLOCATED" if self.node_free[i] == 0 else "MIXED")
                view = Node(name=spec.name, state=state, features=spec.features,
                            partitions=spec.partitions, gpus={spec.gpu_type: spec.gpus},
                            gpus_alloc={spec.gpu_type: used}, mps_total=spec.mps * spec.gpus,
                            mps_alloc=int(round(self.node_mps_used[i] * spec.mps)))
                self._node_views[i] = view
            out.append(view)
        return out

    def partitions(self) -> list[Partition]:
        names: dict[str, list[str]] = {}
        for n in self.nodes_spec:
            for p in n.partitions:
                names.setdefault(p, []).append(n.name)
        return [Partition(p, tuple(ns), default=(i == 0)) for i, (p, ns) in enumerate(names.items())]

    def accounting(self, *, since: str = "now-1day", until: str = "now",
                   job_ids: Sequence[str] = ()) -> list[AccountingRecord]:
        """sacct's records: every finished job's last run, or with `job_ids` every run of
        those jobs (the ones a requeue ended first, as sacct -D lists them)."""
        if job_ids:
            out: list[AccountingRecord] = []
            for job_id in job_ids:
                out.extend(self.requeued_runs.get(job_id, ()))
                job = self.jobs_by_id.get(job_id)
                if job is not None and job.end >= 0 and job.state not in (JobState.PENDING,
                                                                   JobState.RUNNING):
                    out.append(self._record(job))
            return out
        return [self._record(j) for j in self.finished]

    def _record(self, j: SimJob) -> AccountingRecord:
        return AccountingRecord(
            job_id=j.job_id, name=j.trace.workload, account=j.trace.account, user=j.trace.user,
            state=j.state, partition=PARTITION, submit_time=int(j.trace.submit_s), eligible_time=int(j.trace.submit_s),
            start_time=int(j.start), end_time=int(j.end), elapsed_s=int(j.end - j.start),
            alloc_gpus={j.gpu_type: j.trace.num_gpus}, constraints=j.features)

    def account_shares(self) -> dict[str, float]:
        return dict(self.spec.shares)

    def accounts(self) -> set[str]:
        """root, the accounts given shares and every account a trace job was added for."""
        return {"root", *self.spec.shares, *(j.trace.account for j in self.jobs_by_id.values())}

    def scheduler_depths(self) -> SchedulerDepths:
        return self.depths

    def submit(self, args: Sequence[str], script: str | None = None) -> str:
        raise SlurmCommandError(["sbatch", *args], 1, "SimSlurm: submit trace jobs with add()")

    def _pending_job(self, job_id: str) -> SimJob:
        job = self.jobs_by_id.get(job_id)
        if job is None:
            raise JobNotFoundError(job_id)
        if job.state is not JobState.PENDING:
            raise SlurmCommandError(["scontrol", "update", f"jobid={job_id}"], 1,
                                    "Job is no longer pending execution")
        return job

    def update_job(self, job_id: str, update: JobUpdate) -> None:
        job = self._pending_job(job_id)
        if update.features is not None:
            terms = parse_features(update.features)
            unknown = [t for t in terms if t not in self.feature_types]
            if unknown:
                raise SlurmCommandError(["scontrol", "update", f"jobid={job_id}"], 1,
                                        f"Invalid feature specification: {','.join(unknown)}")
            job.features = sys.intern(update.features)  # a few distinct constraints
        for tres in (update.tres_per_job, update.tres_per_node):
            if tres:
                parts = tres.replace("gres/", "gres:").split(":")
                job.pinned = parts[2].lower() if len(parts) == 4 else None
        asked = gpu_request(None, update.tres_per_node) if update.tres_per_node else None
        if asked is not None and asked.mps > 0:
            # what Slurm 24.11 does (22.05 would keep the whole GPU): the job now asks a share
            units, types = self._mps_units
            job.frac = min(asked.mps / mps_per_gpu(units, job.pinned, types), 1.0)
            job.req = None
        if update.nice is not None:
            job.priority = max(1, job.prio_base - update.nice)  # Slurm floors it at 1
            job.nice = update.nice
            self.reordered.append(job)
        job.view = None
        self.touch()

    def hold(self, job_id: str) -> None:
        self._pending_job(job_id).held = True
        self.jobs_by_id[job_id].view = None

    def release(self, job_id: str) -> None:
        self._pending_job(job_id).held = False
        self.jobs_by_id[job_id].view = None
        self.touch()

    def requeue(self, job_id: str) -> None:
        """What `scontrol requeue` does to a checkpointing job: it stops, saves its progress
        and waits again. It loses `requeue_overhead_s` of the progress it made on the type it
        is stopped on (the steps since its last checkpoint, saving and loading it): a restart
        on a faster type redoes them faster, on a slower one slower. Whole-GPU jobs only."""
        job = self.jobs_by_id.get(job_id)
        if job is None:
            raise JobNotFoundError(job_id)
        if job.state is not JobState.RUNNING or job.shared is not None:
            raise SlurmCommandError(["scontrol", "requeue", job_id], 1,
                                    "Job is not running or cannot be requeued")
        now = self.now
        gtype = job.gpu_type
        job.work_left = max(job.work_left - job.rate * (now - job.last), 0.0)
        job.work_left = min(job.work_left + self.requeue_overhead_s / job.runtime[gtype], 1.0)
        del self.running[job_id]
        self._release_whole(job)
        self.busy_gpus[gtype] -= job.trace.num_gpus
        job.run_before += now - job.start
        self.requeued_runs.setdefault(job_id, []).append(replace(
            self._record(job), state=JobState.REQUEUED, end_time=int(now),
            elapsed_s=int(now - job.start)))
        job.earlier_gpu_s[gtype] = job.earlier_gpu_s.get(gtype, 0.0) + job.trace.num_gpus * (now - job.start)
        job.state, job.reason, job.view, job.alloc = JobState.PENDING, "BeginTime", None, []
        job.rate, job.version = 0.0, job.version + 1
        job.restarts += 1
        job.requeued_at = now
        self.pending[job_id] = job
        self.ended_since_calc.append(job)
        self.touch()
        self.job_set_version += 1

    def cancel(self, job_id: str) -> None:
        job = self._pending_job(job_id)
        del self.pending[job_id]
        job.state = JobState.CANCELLED
        self.touch()

    def shares_for(self, accounts: Mapping[str, object]) -> dict[str, float]:
        """Shares of every account (spec value or 1.0)."""
        return {a: float(self.spec.shares.get(a, 1.0)) for a in accounts}
