"""Gavel: heterogeneity-aware max-min fairness over effective throughput (Narayanan et al., OSDI'20).

The published LP: maximise min_j (sum_k T[j,k] X[j,k]) / (w_j * T_equal_j) subject to
sum_j X[j,k] * num_gpus_j <= C_k, sum_k X[j,k] <= 1, X >= 0. Here T[j,k] = 1 / runtime on k
(times mps_slowdown for shares), num_gpus_j = num_gpus * gpu_fraction, C_k = total GPUs of k,
T_equal_j = sum_k T[j,k] * C_k / sum C (time-sharing the cluster in proportion to its types),
and w_j = share(account) / pending jobs of the account, so accounts get throughput in
proportion to their shares.

Approximation for scale (documented): jobs are grouped into classes (account, pinned type,
GPU demand, speed profile = runtime ratios bucketed on a log scale). Identical jobs get the same
allocation in some optimum (the LP is convex and symmetric), so this is exact when members
are identical; the bucketing is the only approximation. When there are more than
`max_classes` classes the buckets are coarsened until they fit. An account enters the LP only
through its weight w, so at each bucket width, when the classes by account are too many (a
centre with hundreds of accounts), the classes group accounts by w on a log scale of the same
width before the width doubles (exact for accounts of equal w; a class's w is its jobs' mean).
The dense class LP then stays small at any number of accounts. It is solved exactly with
our numpy simplex (lp.py). Only pending jobs enter the LP (running jobs are re-decided on the
next pass, as Gavel re-solves each round).

Decisions: gpu_types = the types with X[j,k] >= tolerance * max_k X[j,k], largest X first
(pinned jobs: no type change). nice from Gavel's round priority X_j / (rounds received + 1)
with rounds received ~ the job's account's usage / share relative to the mean (pending jobs have had no
rounds themselves): higher priority -> lower nice. gpu_types -> Features "t1|t2";
nice -> Slurm Nice (higher = later). Only changed attributes are returned.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from slurm_hase.policy.common import (
    check_knob,
    nice_levels,
    only_changes,
    received,
    unique_jobs,
    usable_types,
)
from slurm_hase.policy.lp import FloatArray, max_min_allocation
from slurm_hase.policy.types import ClusterState, Decision, PendingJob

ClassKey = tuple[str, str, float, tuple[int, ...]]  # account (or weight bucket), pin, GPUs, speeds
Classes = dict[ClassKey, list[tuple[PendingJob, list[float]]]]


def job_throughputs(job: PendingJob, types: list[str], all_types: list[str]) -> list[float]:
    """T[j,k] = 1 / effective runtime on k (0 where the job cannot run)."""
    out = []
    for k in all_types:
        if k not in types:
            out.append(0.0)
            continue
        rt = job.runtime_s[k]
        if job.gpu_fraction < 1.0:
            rt *= max(1.0, job.mps_slowdown.get(k, 1.0))
        out.append(1.0 / rt)
    return out


def class_lp(keys: list[ClassKey], classes: Classes, weight: dict[str, float], by_weight: bool,
             cap: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """max_min_allocation's (tput, demand, count, capacity) for `classes` in `keys` order:
    a class's row is its members' mean throughput row over (w x that row's throughput on an
    equal time-share of the cluster); w is the account's, or with `by_weight` the members'
    mean."""
    tput = np.zeros((len(keys), len(cap)))
    demand = np.zeros(len(keys))
    count = np.zeros(len(keys))
    for ci, key in enumerate(keys):
        members = classes[key]
        rows = np.array([t for _, t in members])
        job0 = members[0][0]
        w = (math.fsum(weight[j.account] for j, _ in members) / len(members) if by_weight
             else weight[job0.account])
        t_mean = rows.mean(axis=0)
        t_equal = float(t_mean @ cap) / float(cap.sum())
        tput[ci] = t_mean / (max(w, 1e-12) * t_equal)
        demand[ci] = job0.num_gpus * job0.gpu_fraction
        count[ci] = len(members)
    return tput, demand, count, cap


@dataclass
class GavelPolicy:
    """Class-level Gavel max-min LP, turned into type constraints and nice."""

    tolerance: float = 0.5
    max_classes: float = 120.0

    @property
    def name(self) -> str:
        return "gavel"

    @property
    def summary(self) -> str:
        return "Gavel heterogeneity-aware max-min fairness over effective throughput"

    def __post_init__(self) -> None:
        self.tolerance = check_knob("tolerance", self.tolerance, 0.0, 1.0)
        self.max_classes = check_knob("max_classes", self.max_classes, 2.0, 2000.0)

    def decide(self, state: ClusterState) -> list[Decision]:
        """Solve the class LP and map each job's allocation row to a decision."""
        all_types = sorted(k for k, p in state.pools.items() if p.total_gpus > 0)
        jobs: list[tuple[PendingJob, list[float]]] = []
        pending = unique_jobs(state.pending)  # one record, one decision per job id
        for job in pending:
            types = usable_types(job, state.pools)
            if job.pinned_type is not None:
                types = [job.pinned_type] if job.pinned_type in types else []
            if types:
                jobs.append((job, job_throughputs(job, types, all_types)))
        if not jobs or not all_types:
            return []
        cap = np.array([float(state.pools[k].total_gpus) for k in all_types])
        per_acct: dict[str, int] = defaultdict(int)
        for job, _ in jobs:
            per_acct[job.account] += 1
        weight = {a: state.shares.get(a, 1.0) / n for a, n in per_acct.items()}
        classes, by_weight = self._fitting_classes(jobs, weight)
        keys = sorted(classes)
        x, _ = max_min_allocation(*class_lp(keys, classes, weight, by_weight, cap))
        return only_changes(self._decisions(state, keys, classes, x, all_types), pending)

    def _fitting_classes(self, jobs: list[tuple[PendingJob, list[float]]],
                         weight: dict[str, float]) -> tuple[Classes, bool]:
        """At most max_classes classes (module docstring): by account, else by weight bucket, at
        the finest speed bucket where one fits. True when grouped by weight."""
        step = 0.25  # log2 bucket width for speed ratios (and account weights)
        while True:
            classes = self._classes(jobs, step)
            if len(classes) <= self.max_classes:
                return classes, False
            classes = self._classes(jobs, step, weight)
            if len(classes) <= self.max_classes or step > 64:
                return classes, True
            step *= 2

    def _classes(self, jobs: list[tuple[PendingJob, list[float]]], step: float,
                 weight: dict[str, float] | None = None) -> Classes:
        """Jobs by (account, pinned type, GPU demand, speed profile); with `weight`, by the
        account's weight bucket (log2 width `step`) instead of the account."""
        out: Classes = defaultdict(list)
        for job, t in jobs:
            best = max(t)
            prof = tuple(-1 if v <= 0 else round(math.log2(best / v) / step) for v in t)
            group = (job.account if weight is None
                     else f"w{round(math.log2(max(weight[job.account], 1e-300)) / step)}")
            key = (group, job.pinned_type or "", job.num_gpus * job.gpu_fraction, prof)
            out[key].append((job, t))
        return out

    def _decisions(self, state: ClusterState, keys: list[ClassKey], classes: Classes,
                   x: np.ndarray, all_types: list[str]) -> list[Decision]:
        # usage is service received: a negative or non-finite value (a damaged ledger) counts as
        # none, so no account's rounds reach -1 (a division by zero) or turn every priority NaN
        norm = {a: received(u) / max(state.shares.get(a, 1.0), 1e-12)
                for a, u in state.usage.items()}
        mean_u = sum(norm.values()) / len(norm) if norm else 0.0
        entries: list[tuple[float, float, str, PendingJob, tuple[str, ...]]] = []
        for ci, key in enumerate(keys):
            row = np.round(x[ci], 9)  # float noise must not break ties
            top = float(row.max())
            order = sorted(range(len(all_types)), key=lambda k: (-row[k], all_types[k]))
            allowed = tuple(all_types[k] for k in order
                            if row[k] > 1e-9 and row[k] >= self.tolerance * top)
            for job, _ in classes[key]:
                rounds = norm.get(job.account, 0.0) / mean_u if mean_u > 0 else 0.0
                prio = float(row.sum()) / (1.0 + rounds)
                entries.append((-prio, job.submit_time, job.job_id, job, allowed))
        entries.sort(key=lambda e: (e[0], e[1], e[2]))
        nices = nice_levels([e[3] for e in entries])
        out = []
        for (_, _, jid, job, allowed), nice in zip(entries, nices, strict=True):
            types = allowed if allowed and job.pinned_type is None else None
            out.append(Decision(jid, nice=nice, gpu_types=types, reason="gavel max-min LP"))
        return out
