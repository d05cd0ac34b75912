"""fair_order (vectorised) against the per-job loop it replaces, on random queues with ties."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np
import pytest

from slurm_hase.policy.order import fair_order
from slurm_hase.policy.types import PendingJob, RunningJob

NOW = 1_000_000.0


def loop_order(jobs: Sequence[PendingJob], best: Mapping[str, float], shares: Mapping[str, float],
               usage: Mapping[str, float], running: Sequence[RunningJob],
               age_tau_s: float, due_horizon_s: float = 0.0) -> list[PendingJob]:
    """The module docstring's steps 1 and 2, job by job (the reference)."""
    by_acct: dict[str, list[PendingJob]] = defaultdict(list)
    for j in jobs:
        by_acct[j.account].append(j)

    def key(q: PendingJob) -> tuple[float, float, str]:
        size = q.num_gpus * q.gpu_fraction * best[q.job_id]
        if age_tau_s > 0:
            size /= 1.0 + max(0.0, NOW - q.submit_time) / age_tau_s
        return (size, q.submit_time, q.job_id)

    due: dict[str, float] = defaultdict(float)
    for r in running:
        left = max(0.0, r.expected_end - NOW)
        left = min(left, due_horizon_s) if due_horizon_s > 0 else left
        due[r.account] += r.num_gpus * r.gpu_fraction * r.relative_speed * left
    tagged: list[tuple[float, int, str, PendingJob]] = []
    for acct, queue in by_acct.items():
        w = max(shares.get(acct, 1.0), 1e-12)
        v = (usage.get(acct, 0.0) + due[acct]) / w
        for i, j in enumerate(sorted(queue, key=key)):
            tagged.append((v, i, acct, j))
            v += j.num_gpus * j.gpu_fraction * best[j.job_id] / w
    tagged.sort(key=lambda t: (t[0], t[1], t[2]))
    return [t[3] for t in tagged]


def random_queue(seed: int) -> tuple[list[PendingJob], dict[str, float], list[RunningJob]]:
    rng = np.random.default_rng(seed)
    accounts = [f"acct{k}" for k in range(int(rng.integers(1, 9)))]
    jobs: list[PendingJob] = []
    best: dict[str, float] = {}
    n = int(rng.integers(1, 400))
    for i in range(n):
        if jobs and rng.random() < 0.2:  # a twin of an earlier job: ties broken by job id
            twin = jobs[int(rng.integers(0, len(jobs)))]
            job = PendingJob(str(n * 7 - i), twin.account, "u", twin.submit_time, twin.num_gpus,
                             twin.runtime_s, gpu_fraction=twin.gpu_fraction)
            best[job.job_id] = best[twin.job_id]
        else:
            rt = float(rng.choice([60.0, 3600.0, 7200.0]) * rng.integers(1, 50))
            job = PendingJob(str(n * 7 - i), str(rng.choice(accounts)), "u",
                             NOW - float(rng.integers(0, 5 * 86400)), int(rng.choice([1, 2, 4, 8])),
                             {"v100": rt}, gpu_fraction=float(rng.choice([1.0, 1.0, 0.5])))
            best[job.job_id] = rt
        jobs.append(job)
    running = [RunningJob(f"r{k}", str(rng.choice(accounts)), "u", "v100", int(rng.integers(1, 9)),
                          NOW - 100.0, NOW + float(rng.integers(-500, 90_000)),
                          relative_speed=float(rng.choice([1.0, 0.5])))
               for k in range(int(rng.integers(0, 20)))]
    return jobs, best, running


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize(("age_tau_s", "due_horizon_s"), [(0.0, 0.0), (7200.0, 0.0), (7200.0, 3600.0)])
def test_vectorised_order_is_the_loops_exactly(seed: int, age_tau_s: float,
                                               due_horizon_s: float) -> None:
    jobs, best, running = random_queue(seed)
    accounts = sorted({j.account for j in jobs})
    shares = {a: float(k % 3 + 1) for k, a in enumerate(accounts)}
    usage = {a: 1000.0 * k for k, a in enumerate(accounts[::2])}
    got = fair_order(jobs, [best[j.job_id] for j in jobs], shares, usage, running, NOW, age_tau_s,
                     due_horizon_s)
    want = loop_order(jobs, best, shares, usage, running, age_tau_s, due_horizon_s)
    assert [j.job_id for j in got] == [j.job_id for j in want]


def test_ties_inside_an_account_go_by_job_id_as_text() -> None:
    twins = [PendingJob(jid, "a", "u", NOW - 50.0, 1, {"v100": 100.0}) for jid in ("9", "10", "11")]
    got = fair_order(twins, [100.0] * 3, {}, {}, [], NOW, 7200.0)
    assert [j.job_id for j in got] == ["10", "11", "9"]


def test_empty_queue() -> None:
    assert fair_order([], [], {}, {}, [], NOW, 7200.0) == []


def test_due_horizon_stops_a_long_running_job_from_deferring_its_account() -> None:
    """a holds one 8-GPU job with 10 days left; b holds nothing but has used 2 GPU-days."""
    jobs = [PendingJob("1", "a", "u", NOW - 10.0, 1, {"v100": 3600.0}),
            PendingJob("2", "b", "u", NOW - 10.0, 1, {"v100": 3600.0})]
    running = [RunningJob("r", "a", "u", "v100", 8, NOW - 100.0, NOW + 10 * 86400.0)]
    usage = {"b": 2 * 86400.0}
    whole = fair_order(jobs, [3600.0, 3600.0], {}, usage, running, NOW, 7200.0)
    capped = fair_order(jobs, [3600.0, 3600.0], {}, usage, running, NOW, 7200.0, 3600.0)
    assert [j.account for j in whole] == ["b", "a"]  # a counts 80 GPU-days still due
    assert [j.account for j in capped] == ["a", "b"]  # a counts 8 GPU-hours
