"""Metrics of a simulation run.

* JCT = end - submit; queue wait = start - submit; makespan = last end - first submit.
* Utilisation of type k = GPU-seconds busy on k (MPS jobs count their fraction) / (C_k * makespan).
* Finish-time fairness (Themis): rho = JCT / T_iso, where T_iso is the job's runtime on an
  equal 1/N share of the cluster, N = time-averaged number of jobs in the system (pending +
  running) during the job's life. The share gives a g-GPU job a fraction x_k = C_k / (N * g)
  of a full allocation on each type k; it uses its fastest types first, at most 1 in total;
  T_iso = 1 / sum_k(x_k / runtime_k) (never below its best exclusive runtime). Only the types
  the trace lets the job use count (usable_runtime: an Alibaba pod's gpu_spec): a pod that may
  run on T4s alone is not measured against a V100 share it could never have held.
* Jain's index over accounts: at every sample, active accounts (with jobs) get a weighted
  max-min fair entitlement e_a of the cluster's GPUs (weights = shares, capped by their
  demand); x_a = normalised service rate (GPUs * fraction * speed / best speed) / e_a;
  J = (sum x)^2 / (n * sum x^2). Reported: the mean over the samples (a uniform time grid,
  engine.SimConfig.sample_s) taken while the cluster is contended, i.e. some job is pending,
  and >= 2 accounts are active. Uncontended stretches (every account holds all it asks for,
  e.g. the long tail of a run where a few long jobs finish alone) are left out: fairness is not
  at stake there, and on the Philly bench they are most of the makespan, so counting them would
  lift every policy's index towards 1 (fair 0.989, Slurm 0.71) and hide the contended hours.
* Jain's index per day (`jain_accounts_1d`): the same samples grouped into 1-day windows; per
  window, each account's summed service over its summed entitlement, then Jain over accounts;
  the mean over windows. Fairness counted over time: a gang job that puts its account above
  its entitlement for a few hours, balanced by less later the same day, is not penalised.
  Both are None (n/a in tables, left out of means over seeds) for a run that was never
  contended.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from slurm_hase.policy.common import water_fill
from slurm_hase.predict.mig import gpu_share
from slurm_hase.sim.engine import Sample, SimResult
from slurm_hase.sim.simcluster import SimJob


def jain(values: list[float]) -> float:
    """Jain's fairness index (1 = perfectly equal)."""
    if not values:
        return 1.0
    s, s2 = sum(values), sum(v * v for v in values)
    return (s * s) / (len(values) * s2) if s2 > 0 else 1.0


def contended_entitlements(samples: list[Sample], total_gpus: float,
                           shares: Mapping[str, float]) -> Iterator[tuple[Sample, dict[str, float]]]:
    """(sample, entitlement of each active account) for the samples where fairness is at stake.

    Those are the contended samples (some job pending; module doc) with >= 2 active accounts."""
    for s in samples:
        if s.pending == 0:
            continue  # uncontended: every account holds what it asks for
        active = {a: d for a, (_, d) in s.accounts.items() if d > 0}
        if len(active) >= 2:
            yield s, water_fill(total_gpus, shares, active)


def level_series(samples: list[Sample], total_gpus: float, shares: Mapping[str, float]
                 ) -> Iterator[tuple[float, dict[str, float]]]:
    """(time, each active account's level = normalised service / entitlement) for every
    contended sample with >= 2 active accounts: the values Jain's index is taken over."""
    for s, ent in contended_entitlements(samples, total_gpus, shares):
        yield s.t, {a: s.accounts[a][0] / e for a, e in ent.items() if e > 0}


def jain_over_time(samples: list[Sample], total_gpus: float, shares: Mapping[str, float]
                   ) -> float | None:
    """Mean Jain's index over the contended samples where at least two accounts have jobs;
    None when there is none (never contended: nothing to judge, not a perfect 1)."""
    vals = [jain(list(levels.values()))
            for _, levels in level_series(samples, total_gpus, shares)]
    return float(np.mean(vals)) if vals else None


def jain_over_windows(samples: list[Sample], total_gpus: float, shares: Mapping[str, float],
                      window_s: float = 86400.0) -> float | None:
    """Mean over windows of Jain's index of each account's summed service / summed entitlement.

    The same contended samples as jain_over_time, grouped by t // window_s: an account that
    holds more now and less later within one window evens out (fairness counted over time)."""
    windows: dict[int, dict[str, list[float]]] = {}
    for s, ent in contended_entitlements(samples, total_gpus, shares):
        sums = windows.setdefault(int(s.t // window_s), {})
        for a, e in ent.items():
            acc = sums.setdefault(a, [0.0, 0.0])
            acc[0] += s.accounts[a][0]
            acc[1] += e
    vals = [jain([got / due for got, due in sums.values() if due > 0]) for sums in windows.values()]
    return float(np.mean(vals)) if vals else None


def capacity(gpus_by_type: Mapping[str, int]) -> float:
    """The cluster's GPUs, a MIG instance counted as its part of a GPU (predict/mig.py): the
    capacity entitlements are shares of, as the policies count it (policy/levels.py)."""
    return float(sum(n * gpu_share(t) for t, n in gpus_by_type.items()))


def account_metrics(result: SimResult) -> dict[str, dict[str, float | None]]:
    """Per account: finished jobs, their average JCT and queue wait (s), GPU-hours held, and
    its mean level (normalised service / entitlement, the Jain index's term) over the contended
    samples where it had jobs (None: it never had jobs while the cluster was contended)."""
    total = capacity(result.gpus_by_type)
    sums: dict[str, list[float]] = {}  # account -> [jobs, JCT, wait, GPU-seconds]
    for j in result.jobs:
        if j.end < 0 or j.start < 0:
            continue
        acc = sums.setdefault(j.trace.account, [0.0, 0.0, 0.0, 0.0])
        held = j.trace.num_gpus * j.frac * (j.end - j.start)
        acc[0] += 1
        acc[1] += j.end - j.trace.submit_s
        acc[2] += j.end - j.trace.submit_s - (j.end - j.start + j.run_before)
        acc[3] += held + sum(j.earlier_gpu_s.values())
    levels: dict[str, list[float]] = {}
    for _, by_account in level_series(result.samples, total, result.shares):
        for a, level in by_account.items():
            levels.setdefault(a, []).append(level)
    out: dict[str, dict[str, float | None]] = {}
    for a in sorted(sums.keys() | levels.keys()):
        n, jct, wait, gpu_s = sums.get(a, [0.0, 0.0, 0.0, 0.0])
        lv = levels.get(a)
        out[a] = {"jobs": int(n), "avg_jct_s": jct / n if n else None,
                  "avg_wait_s": wait / n if n else None, "gpu_hours": gpu_s / 3600.0,
                  "mean_level": float(np.mean(lv)) if lv else None}
    return out


def usable_runtime(job: SimJob) -> dict[str, float]:
    """The job's exclusive runtime on each GPU type its trace row allows (SimJob.trace_types:
    its hard constraint, such as Alibaba's gpu_spec, and pinned type, resolved by the nodes'
    features as the simulated Slurm resolves them), not the Features a daemon or hsbatch set
    (those may change). All types when none is known (a job built without a cluster)."""
    allowed = job.trace_types
    usable = {t: r for t, r in job.runtime.items() if t in allowed}
    return usable or dict(job.runtime)


def isolated_runtime(runtime: Mapping[str, float], gpus: float, n_jobs: float,
                     capacity: Mapping[str, int]) -> float:
    """T_iso of a job on a 1/N share of every GPU type (see module doc)."""
    rate, used = 0.0, 0.0
    for t, r in sorted(runtime.items(), key=lambda kv: kv[1]):
        if not np.isfinite(r) or r <= 0 or t not in capacity:
            continue
        x = min(capacity[t] / (max(n_jobs, 1.0) * max(gpus, 1e-9)), 1.0 - used)
        rate += x / r
        used += x
        if used >= 1.0:
            break
    best = min((r for t, r in runtime.items() if t in capacity and np.isfinite(r)), default=np.inf)
    return max(1.0 / rate, best) if rate > 0 else float("inf")


def compute(result: SimResult) -> dict[str, Any]:
    """All headline metrics as a JSON-able dict."""
    done = [j for j in result.jobs if j.end >= 0 and j.start >= 0]
    if not done:
        return {"jobs": 0, "unfinished": result.unfinished}
    submit = np.array([j.trace.submit_s for j in done])
    start = np.array([j.start for j in done])
    end = np.array([j.end for j in done])
    ran = end - start + np.array([j.run_before for j in done])
    jct = end - submit
    wait = jct - ran  # time spent pending, every requeue included
    makespan = float(end.max() - submit.min())
    # time-averaged jobs in system via the sample step function
    ts = np.array([s.t for s in result.samples])
    ns = np.array([s.pending + s.running for s in result.samples], dtype=float)
    integral = np.concatenate([[0.0], np.cumsum(ns[:-1] * np.diff(ts))])

    def avg_n(a: float, b: float) -> float:
        ia = np.interp(a, ts, integral)
        ib = np.interp(b, ts, integral)
        return float((ib - ia) / (b - a)) if b > a else float(ns[min(int(np.searchsorted(ts, a)), len(ns) - 1)])

    rho = np.array([
        jct[i] / isolated_runtime(usable_runtime(j), j.trace.num_gpus * j.trace.gpu_fraction,
                                  avg_n(submit[i], end[i]), result.gpus_by_type)
        for i, j in enumerate(done)])
    busy: dict[str, float] = dict.fromkeys(result.gpus_by_type, 0.0)
    for j in done:
        busy[j.gpu_type] += j.trace.num_gpus * j.frac * (j.end - j.start)
        for t, gs in j.earlier_gpu_s.items():
            busy[t] += gs
    util = {t: busy[t] / (c * makespan) if makespan > 0 else 0.0 for t, c in result.gpus_by_type.items()}
    placed: dict[str, int] = {}
    for j in done:
        placed[j.gpu_type] = placed.get(j.gpu_type, 0) + 1
    total = capacity(result.gpus_by_type)
    return {
        "jobs": len(done),
        "unfinished": result.unfinished,
        "avg_jct_s": float(jct.mean()),
        "p99_jct_s": float(np.percentile(jct, 99)),
        "avg_wait_s": float(wait.mean()),
        "p99_wait_s": float(np.percentile(wait, 99)),
        "makespan_s": makespan,
        "util_by_type": util,
        "jobs_by_type": dict(sorted(placed.items())),
        "rho_max": float(rho.max()),
        "rho_p99": float(np.percentile(rho, 99)),
        "rho_gt1_share": float((rho > 1.0).mean()),
        "jain_accounts": jain_over_time(result.samples, total, result.shares),
        "jain_accounts_1d": jain_over_windows(result.samples, total, result.shares),
        "cycles": result.cycles,
        "quiet_cycles": result.quiet_cycles,
        "updates": result.updates,
        "requeues": int(sum(j.restarts for j in result.jobs)),
        "wall_s": result.wall_s,
    }


def job_rows(result: SimResult) -> list[dict[str, Any]]:
    """One CSV row per job."""
    return [{
        "job_id": j.job_id, "account": j.trace.account, "workload": j.trace.workload,
        "num_gpus": j.trace.num_gpus, "gpu_fraction": j.frac,
        "submit_s": round(j.trace.submit_s, 3), "start_s": round(j.start, 3),
        "end_s": round(j.end, 3), "gpu_type": j.gpu_type, "state": j.state.value,
        "features": j.features, "nice": j.nice,
    } for j in result.jobs]
