"""Live job states as Slurm prints them: job_state_string names a set flag instead of the base
state (scontrol's JobState=, 22.05's squeue --json job_state), e.g. CONFIGURING for a running
job whose nodes boot and REQUEUE_HOLD for a held requeued job (squeue(1), JOB STATE CODES)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_hase.slurm.parse_json import parse_squeue_json
from slurm_hase.slurm.parse_sacct_text import parse_sacct_parsable
from slurm_hase.slurm.parse_text import parse_scontrol_jobs
from slurm_hase.slurm.types import JobState

# squeue(1) JOB STATE CODES: these flags are only ever set on a job with an allocation
# (CONFIGURING "allocated resources, but waiting for them to become ready", RESIZING, STOPPED
# "has an allocation, but execution has been stopped") or on one back in the queue
RUNNING_FLAGS = ("CONFIGURING", "RESIZING", "STOPPED")
PENDING_FLAGS = ("REQUEUE_HOLD", "SPECIAL_EXIT", "RESV_DEL_HOLD", "REQUEUE_FED")


def _squeue_22_05_record(fixtures_dir: Path, name: str) -> dict[str, object]:
    doc = json.loads((fixtures_dir / "slurm" / "22.05" / "squeue.json").read_text())
    return next(j for j in doc["jobs"] if j["name"] == name)


def _scontrol_line(fixtures_dir: Path, version: str, name: str) -> str:
    lines = (fixtures_dir / "slurm" / version / "scontrol-show-job.txt").read_text().splitlines()
    return next(ln for ln in lines if f" JobName={name} " in ln)


@pytest.mark.parametrize(("flag", "base"), [(f, JobState.RUNNING) for f in RUNNING_FLAGS]
                         + [(f, JobState.PENDING) for f in PENDING_FLAGS])
def test_squeue_22_05_flag_state_reads_as_its_base(fixtures_dir: Path, flag: str,
                                                   base: JobState) -> None:
    """22.05's squeue --json prints job_state_string: the flag in place of the base state."""
    rec = _squeue_22_05_record(fixtures_dir, "run-a100" if base is JobState.RUNNING else "held")
    assert parse_squeue_json(json.dumps({"jobs": [rec]}))[0].state is base  # as captured
    rec["job_state"] = flag
    job = parse_squeue_json(json.dumps({"jobs": [rec]}))[0]
    assert job.state is base
    if base is JobState.RUNNING:
        assert job.alloc_gpus == {"a100": 1}
    else:
        assert job.held and job.pending


@pytest.mark.parametrize("version", ["22.05", "24.11"])
@pytest.mark.parametrize(("flag", "base"), [("CONFIGURING", JobState.RUNNING),
                                            ("REQUEUE_HOLD", JobState.PENDING)])
def test_scontrol_flag_state_reads_as_its_base(fixtures_dir: Path, version: str, flag: str,
                                               base: JobState) -> None:
    """scontrol show job prints job_state_string on every version."""
    line = _scontrol_line(fixtures_dir, version, "run-a100" if base is JobState.RUNNING else "held")
    assert parse_scontrol_jobs(line + "\n")[0].state is base  # as captured
    old = "JobState=RUNNING " if base is JobState.RUNNING else "JobState=PENDING "
    assert old in line
    job = parse_scontrol_jobs(line.replace(old, f"JobState={flag} ") + "\n")[0]
    assert job.state is base


@pytest.mark.parametrize("flag", ["SIGNALING", "STAGE_OUT", "REVOKED"])
def test_flags_without_one_base_state_stay_other(fixtures_dir: Path, flag: str) -> None:
    rec = _squeue_22_05_record(fixtures_dir, "run-a100")
    rec["job_state"] = flag
    assert parse_squeue_json(json.dumps({"jobs": [rec]}))[0].state is JobState.OTHER


def test_sacct_states_are_not_read_as_live_ones(fixtures_dir: Path) -> None:
    """sacct's RESIZING names a finished record (the allocation before a resize): not RUNNING."""
    raw = (fixtures_dir / "slurm" / "22.05" / "sacct-parsable.txt").read_text()
    header, first = raw.splitlines()[:2]
    state = first.split("|")[header.split("|").index("State")]
    rec = parse_sacct_parsable(f"{header}\n{first.replace(f'|{state}|', '|RESIZING|')}\n")[0]
    assert rec.state is JobState.OTHER


def test_special_exit_job_captured_on_22_05(fixtures_dir: Path) -> None:
    """A running job requeued with `scontrol requeuehold State=SpecialExit` (local-22.05
    captures): squeue --json and scontrol both print SPECIAL_EXIT; it pends, held."""
    local = fixtures_dir / "slurm" / "local-22.05"
    from_scontrol = parse_scontrol_jobs((local / "scontrol-show-job-special-exit.txt").read_text())
    jobs = parse_squeue_json((local / "squeue-special-exit.json").read_text())
    # the JSON also lists an earlier try of the same job, cancelled (22.05 lists finished jobs)
    assert sorted(j.state for j in jobs if j.name == "special-exit") == [JobState.CANCELLED,
                                                                         JobState.PENDING]
    from_squeue = next(j for j in jobs if j.job_id == from_scontrol[0].job_id)
    for job in (from_squeue, from_scontrol[0]):
        assert job.state is JobState.PENDING and job.held and job.restarts == 1
        assert job.gpu is not None and job.gpu.count == 1
