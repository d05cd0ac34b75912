"""What slurmctld does on its own: multifactor priority, the main scheduler and backfill.

* Priority = PriorityWeightAge * min(age / PriorityMaxAge, 1)
             + PriorityWeightFairshare * fair-tree factor(account) - Nice,
  recomputed every PriorityCalcPeriod. Usage per account decays with PriorityDecayHalfLife and
  is charged as billing * seconds, billing = sum over the job's GPUs of TRESBillingWeights for
  its type (1.0 when unset, i.e. the plain GPU count; MPS jobs pay their fraction).
* Fair Tree on a flat account list: accounts ranked by level fairshare S_norm / U_norm; the
  factor is (n - rank) / n, ties share a rank.
* Main scheduler (on events and every sched_interval): strict priority order over at most
  default_queue_depth jobs; the first job that cannot start blocks the partition.
* Backfill (every bf_interval): up to bf_max_job_test jobs in priority order; a job starts now
  if it fits and does not delay any earlier job's reservation (computed from running jobs'
  start + time limit, like Slurm); otherwise it gets a reservation on its earliest type.
* Among the allowed GPU types, nodes are tried in config order (no node Weight).

Speed: the priority order is cached (a sorted list of keys and jobs) and kept up to date
incrementally: jobs put in the queue (submitted or requeued: SimSlurm.pending.entered) are
inserted by bisection, jobs that left it are dropped when a pass walks past them, jobs whose
priority changed (recalc here, Nice updates from the daemon: SimSlurm.reordered) are moved, and a
full re-sort happens only when many keys changed at once.
The key (-priority, submit time, index) is unique, so the cached order is exactly the sorted one.
Passes over the whole queue (recalc, the demand the engine samples) read numpy columns of
per-job numbers by index and the queue's index mask (PendingQueue.indexes), not the job objects.
Backfill returns at once when no GPU is free and no MPS-shared GPU has room (it could start
nothing, and its reservations are its own).
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterator, Mapping

import numpy as np

from slurm_hase.predict.mig import mig_parts
from slurm_hase.sim.simcluster import grown
from slurm_hase.sim.simslurm import SimJob, SimSlurm
from slurm_hase.sim.slurmconf import SlurmConfig

OrderKey = tuple[int, float, int]


def order_key(job: SimJob) -> OrderKey:
    """Sort key of the pending order: highest priority first, then submit time, then index."""
    return (-job.priority, job.trace.submit_s, job.idx)


class SlurmScheduler:
    """Priority and scheduling passes over a SimSlurm."""

    def __init__(self, sim: SimSlurm, config: SlurmConfig, shares: Mapping[str, float]) -> None:
        self.sim = sim
        self.config = config
        self.shares = dict(shares)
        self.usage: dict[str, float] = {}
        self.fs_factor: dict[str, float] = {}
        self.last_calc: float | None = None
        # the cached priority order (see module doc): parallel sorted lists, and each cached
        # job's key by index; entries of jobs no longer pending are dropped lazily
        self._keys: list[OrderKey] = []
        self._queue: list[SimJob] = []
        self._cached: dict[int, OrderKey] = {}
        self._resort = True
        # per-job columns by index (numpy), for passes over the whole queue: submit time,
        # account number, Nice and the priority last set; refreshed from the jobs put in the
        # queue and the jobs whose priority changed (the only ways Nice or priority change)
        self._col_submit = np.zeros(0, np.float64)
        self._col_acct = np.zeros(0, np.int64)
        self._col_nice = np.zeros(0, np.int64)
        self._col_prio = np.zeros(0, np.int64)
        self._col_base = np.zeros(0, np.int64)
        self._col_demand = np.zeros(0, np.float64)  # GPUs x fraction (x MIG part: below)
        self._acct_no: dict[str, int] = {}
        # MIG instance types -> their part of a GPU: a job that may only use such types asks
        # that part of each GPU (policy/levels.py counts it so too); {} without MIG types
        self._parts = mig_parts(sim.type_order)

    # ------------------------------------------------------------------ priority

    def _billing(self, job: SimJob) -> float:
        w = self.config.billing.get(job.gpu_type, 1.0)
        return w * job.trace.num_gpus * job.frac

    def recalc(self, now: float) -> None:
        """Decay usage, charge running (and just-ended) jobs, refresh every pending priority."""
        last = self.last_calc
        if last is not None and now > last:
            decay = 0.5 ** ((now - last) / self.config.decay_half_life_s)
            for acct in self.usage:
                self.usage[acct] *= decay
            for job in itertools.chain(self.sim.running.values(), self.sim.ended_since_calc):
                end = now if job.end < 0 or job.end > now else job.end
                dt = end - max(job.start, last)
                if dt > 0:
                    acct = job.trace.account
                    self.usage[acct] = self.usage.get(acct, 0.0) + self._billing(job) * dt
        self.sim.ended_since_calc.clear()
        self.last_calc = now
        self._refresh_columns()
        idx = self.sim.pending.indexes()
        present = set(np.unique(self._col_acct[idx]).tolist())
        self._factors({a for a, no in self._acct_no.items() if no in present})
        if len(idx):
            self._reprioritize_all(idx, now)

    def _refresh_columns(self) -> None:
        """Copy the numbers of jobs put in the queue or re-prioritised since into the columns."""
        sim = self.sim
        fresh = list(itertools.chain(sim.pending.entered, sim.reordered))
        if not fresh:
            return
        top = max(j.idx for j in fresh)
        for name in ("_col_submit", "_col_acct", "_col_nice", "_col_prio", "_col_base",
                     "_col_demand"):
            setattr(self, name, grown(getattr(self, name), top))
        for job in fresh:
            self._set_columns(job)

    def _set_columns(self, job: SimJob) -> None:
        i, acct_no = job.idx, self._acct_no
        self._col_submit[i] = job.trace.submit_s
        self._col_acct[i] = acct_no.setdefault(job.trace.account, len(acct_no))
        self._col_nice[i] = job.nice
        self._col_prio[i] = job.priority
        self._col_base[i] = job.prio_base
        demand = job.trace.num_gpus * job.trace.gpu_fraction
        if self._parts:
            demand *= max((self._parts.get(t, 1.0) for t in job.trace_types
                           if job.runtime[t] < math.inf), default=1.0)
        self._col_demand[i] = demand

    def pending_demand(self) -> dict[str, float]:
        """GPUs (x fraction) asked for by each account's pending jobs (accounts with any)."""
        self._refresh_columns()
        idx = self.sim.pending.indexes()
        accts, n = self._col_acct[idx], len(self._acct_no)
        sums = np.bincount(accts, weights=self._col_demand[idx], minlength=n).tolist()
        counts = np.bincount(accts, minlength=n).tolist()
        return {a: sums[no] for a, no in self._acct_no.items() if counts[no]}

    def _reprioritize_all(self, idx: np.ndarray, now: float) -> None:
        """prioritize() for every pending job at once (numpy, the same float arithmetic, from
        the columns), then the cached order rebuilt in one sort: with a deep queue (~10^4 jobs)
        this was most of a simulation's time when done job by job."""
        cfg = self.config
        fs_by_no = np.ones(len(self._acct_no), np.float64)
        for acct, no in self._acct_no.items():
            fs_by_no[no] = self.fs_factor.get(acct, 1.0)
        submit = self._col_submit[idx]
        fs = fs_by_no[self._col_acct[idx]]
        old = self._col_prio[idx]
        age = np.minimum(np.maximum(now - submit, 0.0) / cfg.max_age_s, 1.0)
        base = (cfg.weight_age * age + cfg.weight_fairshare * fs).astype(np.int64)
        prio = np.maximum(base - self._col_nice[idx], 1)  # as Slurm: priority 0 is kept for held jobs
        by_idx = self.sim.by_idx
        new_base = np.flatnonzero(base != self._col_base[idx])
        if len(new_base):
            for i, b in zip(idx[new_base].tolist(), base[new_base].tolist(), strict=True):
                by_idx[i].prio_base = b
            self._col_base[idx[new_base]] = base[new_base]
        changed = np.flatnonzero(prio != old)
        if not len(changed):
            return
        for i, p in zip(idx[changed].tolist(), prio[changed].tolist(), strict=True):
            job = by_idx[i]
            job.priority = p
            job.view = None
        self._col_prio[idx[changed]] = prio[changed]
        self.sim.state_version += 1
        self._rebuild(idx)

    def _rebuild(self, idx: np.ndarray) -> None:
        """The cached order of every pending job (`idx`: their indexes) from scratch, by the
        unique key (-priority, submit time, index): one numpy sort, not ~10^4 Python tuples.
        The caller has refreshed the columns."""
        neg = -self._col_prio[idx]
        submit = self._col_submit[idx]
        order = np.lexsort((idx, submit, neg))
        keys = list(zip(neg[order].tolist(), submit[order].tolist(), idx[order].tolist(),
                        strict=True))
        self._keys = keys
        by_idx = self.sim.by_idx
        self._queue = [by_idx[i] for i in idx[order].tolist()]
        self._cached = {k[2]: k for k in keys}
        self._resort = False
        self.sim.reordered.clear()  # every pending job is in the order just built
        self.sim.pending.entered.clear()

    def _factors(self, pending_accounts: set[str]) -> None:
        accts = set(self.shares) | set(self.usage) | pending_accounts
        if not accts:
            return
        tot_s = sum(self.shares.get(a, 1.0) for a in accts)
        tot_u = sum(self.usage.values())
        level = {}
        for a in accts:
            s = self.shares.get(a, 1.0) / tot_s
            u = self.usage.get(a, 0.0) / tot_u if tot_u > 0 else 0.0
            level[a] = s / u if u > 0 else float("inf")
        ranked = sorted(set(level.values()), reverse=True)
        rank = {v: i for i, v in enumerate(ranked)}
        n = len(accts)
        self.fs_factor = {a: (n - rank[level[a]]) / n for a in accts}

    def prioritize(self, job: SimJob, now: float) -> None:
        """Set the job's multifactor priority."""
        cfg = self.config
        age = min(max(now - job.trace.submit_s, 0.0) / cfg.max_age_s, 1.0)
        fs = self.fs_factor.get(job.trace.account, 1.0)
        job.prio_base = int(cfg.weight_age * age + cfg.weight_fairshare * fs)
        prio = max(1, job.prio_base - job.nice)  # as Slurm: priority 0 is kept for held jobs
        if prio != job.priority:
            job.priority = prio
            job.view = None
            self.sim.state_version += 1
            if job.idx in self._cached:
                self.sim.reordered.append(job)
        if job.idx < len(self._col_prio):  # else it is new, in the queue's `entered`
            self._set_columns(job)

    def order(self) -> list[SimJob]:
        """Pending jobs, highest priority first (then submit time, then id)."""
        return list(self._ordered())

    def _ordered(self) -> Iterator[SimJob]:
        """Pending jobs in priority order, from the cache; a caller may stop early."""
        self._sync()
        keys, queue, cached, pending = self._keys, self._queue, self._cached, self.sim.pending
        i = 0
        while i < len(queue):
            job = queue[i]
            if pending.get(job.job_id) is not job:  # started or cancelled since it was cached
                del queue[i], keys[i], cached[job.idx]
                continue
            yield job
            i += 1

    def _sync(self) -> None:
        """Bring the cached order up to date with jobs put in the queue and key changes."""
        sim = self.sim
        moved, entered = sim.reordered, sim.pending.entered
        self._refresh_columns()
        if self._resort or len(moved) + len(entered) > max(64, len(self._queue) // 16):
            self._rebuild(sim.pending.indexes())
        else:
            keys, queue, cached = self._keys, self._queue, self._cached
            for job in itertools.chain(moved, entered):  # a requeued job may still have an entry
                key = cached.pop(job.idx, None)
                if key is not None:
                    i = bisect.bisect_left(keys, key)
                    del keys[i], queue[i]
            for job in itertools.chain(moved, entered):
                if job.idx not in cached and sim.pending.get(job.job_id) is job:
                    key = order_key(job)
                    i = bisect.bisect_left(keys, key)
                    keys.insert(i, key)
                    queue.insert(i, job)
                    cached[job.idx] = key
        moved.clear()
        entered.clear()

    # ------------------------------------------------------------------ passes

    def main(self, now: float) -> int:
        """The main scheduler; returns how many jobs started."""
        started = 0
        blocked = False
        for job in itertools.islice(self._ordered(), self.config.default_queue_depth):
            if job.held:
                continue
            types = self.sim.allowed_types(job)
            if not types:
                self._reason(job, "BadConstraints")
                continue
            if blocked:
                self._reason(job, "Priority")
                continue
            for t in types:
                if self.sim.fits_now(job, t):
                    self.sim.start(job, t, now)
                    started += 1
                    break
            else:
                self._reason(job, "Resources")
                blocked = True
        return started

    def _reason(self, job: SimJob, reason: str) -> None:
        if job.reason != reason:
            job.reason = reason
            job.view = None

    def backfill(self, now: float) -> int:
        """One backfill pass; returns how many jobs started."""
        sim = self.sim
        if not sim.any_room():
            return 0  # no job can start, and a pass changes nothing else (reservations are its own)
        ends: dict[str, list[float]] = {t: [] for t in sim.type_order}
        gpus: dict[str, list[tuple[float, int]]] = {t: [] for t in sim.type_order}
        for job in sim.running.values():
            if job.shared is None:
                gpus[job.gpu_type].append((job.start + job.time_limit, job.trace.num_gpus))
        cum: dict[str, list[int]] = {}
        for t, rows in gpus.items():
            rows.sort()
            ends[t] = [e for e, _ in rows]
            cum[t] = list(itertools.accumulate(g for _, g in rows))
        res: dict[str, list[list[float]]] = {t: [] for t in sim.type_order}  # [shadow, slack]
        reserved = dict.fromkeys(sim.type_order, 0)
        started = tested = 0
        for job in self._ordered():
            if tested >= self.config.bf_max_job_test:
                break
            if job.held:
                continue
            tested += 1
            types = sim.allowed_types(job)
            frac = job.frac < 1.0
            end = now + job.time_limit
            placed = False
            for t in types:
                if not sim.fits_now(job, t):
                    continue
                need = 0 if frac and sim.type_free[t] == 0 else (1 if frac else job.trace.num_gpus)
                hit = [r for r in res[t] if end > r[0]]
                if all(r[1] >= need for r in hit):
                    for r in hit:
                        r[1] -= need
                    sim.start(job, t, now)
                    started += 1
                    placed = True
                    break
            if placed and not sim.any_room():
                break
            if placed or not types:
                continue
            need = 1 if frac else job.trace.num_gpus
            best: tuple[float, str, float] | None = None
            for t in types:
                want = need + reserved[t]
                if want > sim.type_total[t]:
                    continue
                free = sim.type_free[t]
                if free >= want:
                    cand = (now, t, float(free - want))
                else:
                    i = bisect.bisect_left(cum[t], want - free)
                    if i >= len(cum[t]):
                        continue
                    cand = (ends[t][i], t, float(free + cum[t][i] - want))
                if best is None or cand[0] < best[0]:
                    best = cand
            if best is not None:
                res[best[1]].append([best[0], best[2]])
                reserved[best[1]] += need
        return started
