"""--prefer as Slurm prints it (local-22.05 and local-24.11 captures): a pending job's preferred
features in Prefer; once Slurm runs a job on them in place of its constraint (a100|v100 here),
Features names the preference and Prefer is empty, on both releases."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hase.slurm.parse_json import parse_squeue_json
from slurm_hase.slurm.parse_text import parse_scontrol_jobs
from slurm_hase.slurm.types import JobState


@pytest.mark.parametrize("version", ["22.05", "24.11"])
def test_prefer_before_and_after_the_job_starts(fixtures_dir: Path, version: str) -> None:
    local = fixtures_dir / "slurm" / f"local-{version}"
    from_scontrol = parse_scontrol_jobs((local / "scontrol-show-job-prefer.txt").read_text())
    by_id = {j.job_id: j for j in parse_squeue_json((local / "squeue-prefer.json").read_text())}
    held, ran = from_scontrol
    for job in (held, by_id[held.job_id]):
        assert job.name == "prefer-held" and job.state is JobState.PENDING and job.held
        assert (job.prefer, job.features) == ("t4", "")
    for job in (ran, by_id[ran.job_id]):
        assert job.name == "prefer-ran" and job.state is JobState.RUNNING
        assert (job.prefer, job.features, job.nodes) == ("", "t4", "t4-1")
        assert job.alloc_gpus == {"t4": 1}
    # every other job of the capture prefers nothing
    assert {j.prefer for j in by_id.values() if not j.name.startswith("prefer-")} <= {""}
