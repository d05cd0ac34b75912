"""A newline inside a job's name or comment (sbatch takes both) splits the record in Slurm's
text output: scontrol show job -o and sacct -P print the value as it is (local-22.05 captures
sacct-newline.txt and scontrol-show-job-newline.txt, by ../capture-local.sh)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hase.errors import SlurmParseError
from slurm_hase.slurm import commands
from slurm_hase.slurm.parse_sacct_text import parse_sacct_parsable
from slurm_hase.slurm.parse_text import parse_scontrol_jobs
from slurm_hase.slurm.types import JobState

LOCAL = Path("slurm") / "local-22.05"


def _read(fixtures_dir: Path, name: str) -> str:
    return (fixtures_dir / LOCAL / name).read_text()


def test_scontrol_job_with_newline_in_comment_and_name(fixtures_dir: Path) -> None:
    raw = _read(fixtures_dir, "scontrol-show-job-newline.txt")
    assert raw.count("\n") == 4  # two records, each split once
    comment, name = parse_scontrol_jobs(raw)
    assert (comment.name, comment.comment) == ("nl-comment", "line one\nline two")
    assert (name.name, name.comment) == ("nl\nname", "")
    for job in (comment, name):
        assert job.state is JobState.RUNNING and job.account == "teama" and job.user == "root"
        assert job.alloc_gpus == {"a100": 1} and job.tres_per_job == "gres:gpu:1"


def test_sacct_with_newline_in_comment_and_name(fixtures_dir: Path) -> None:
    raw = _read(fixtures_dir, "sacct-newline.txt")
    assert raw.count("\n") == 5  # the header, then two records, each split once
    comment, name = parse_sacct_parsable(raw, delimiter=commands.SACCT_DELIMITER)
    assert (comment.name, comment.comment) == ("nl-comment", "line one\nline two")
    assert (name.name, name.comment) == ("nl\nname", "")
    for rec in (comment, name):
        assert rec.state is JobState.COMPLETED and rec.elapsed_s == 5 and rec.partition == "gpu"
        assert rec.alloc_gpus == {"a100": 1} and rec.nodes == "a100-1"
    assert int(name.job_id) == int(comment.job_id) + 1


def test_sacct_record_cut_after_a_newline_still_raises(fixtures_dir: Path) -> None:
    """The name's record cut at its newline: too few fields, never a record of the parts."""
    raw = _read(fixtures_dir, "sacct-newline.txt")
    cut = raw[: raw.index("\nname") + 1]
    with pytest.raises(SlurmParseError, match="fields, header has 17"):
        parse_sacct_parsable(cut, delimiter=commands.SACCT_DELIMITER)


def test_scontrol_output_not_opening_with_a_record_still_raises(fixtures_dir: Path) -> None:
    raw = _read(fixtures_dir, "scontrol-show-job-newline.txt")
    with pytest.raises(SlurmParseError, match="does not start with JobId="):
        parse_scontrol_jobs(raw[raw.index("line two"):])
