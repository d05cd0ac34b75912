"""A state listing one pending job twice (two records, one job id): every policy decides once
per job, from the first record, and fair does not crash on it."""

from __future__ import annotations

import pytest

from slurm_hase.policy.common import unique_jobs
from slurm_hase.policy.registry import make_policy
from slurm_hase.policy.types import ClusterState, GpuPool, PendingJob

POOLS = {"a100": GpuPool("a100", 4, 4), "v100": GpuPool("v100", 4, 4)}


def twice() -> list[PendingJob]:
    return [PendingJob("1", "a", "u", 0.0, 1, {"a100": 100.0, "v100": 400.0}),
            PendingJob("2", "b", "u", 5.0, 1, {"a100": 100.0, "v100": 150.0}),
            PendingJob("1", "a", "u", 0.0, 1, {"v100": 100.0})]


def test_unique_jobs_keeps_the_first_record_and_the_very_list_without_repeats() -> None:
    jobs = twice()
    assert [j.runtime_s for j in unique_jobs(jobs)] == [jobs[0].runtime_s, jobs[1].runtime_s]
    same = jobs[:2]
    assert unique_jobs(same) is same


@pytest.mark.parametrize("name", ["fair", "hase", "gavel"])
def test_one_decision_per_job_id_from_its_first_record(name: str) -> None:
    # fair was KeyError 'v100' (its per-job memo held the second record's types while routing
    # the first); hase and gavel decided for job 1 twice, once per record
    out = make_policy(name).decide(ClusterState(10.0, POOLS, twice(), []))
    ids = [d.job_id for d in out]
    assert sorted(ids) == sorted(set(ids))
    first = next(d for d in out if d.job_id == "1")
    assert first.gpu_types is None or set(first.gpu_types) <= {"a100", "v100"}
    assert first.gpu_types is None or first.gpu_types[0] == "a100"
