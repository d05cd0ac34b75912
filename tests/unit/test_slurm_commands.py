"""Command-line builders: exact argv lists, values as single elements."""

from __future__ import annotations

from slurm_hase.slurm import commands
from slurm_hase.slurm.types import JobUpdate


def test_update_job_only_set_fields_in_order() -> None:
    upd = JobUpdate(nice=50, features="t4|v100", tres_per_node="gres:gpu:t4:1",
                    comment='{"v":1, "model": "resnet 50"}')
    assert commands.update_job("42", upd) == [
        "scontrol", "update", "jobid=42", "Nice=50", "Features=t4|v100",
        "TresPerNode=gres:gpu:t4:1", 'Comment={"v":1, "model": "resnet 50"}',
    ]
    assert commands.update_job("7", JobUpdate(tres_per_job="gres/gpu:v100:1")) == [
        "scontrol", "update", "jobid=7", "TresPerJob=gres/gpu:v100:1"]


def test_update_job_empty_features_clears() -> None:
    assert commands.update_job("7", JobUpdate(features="", nice=0)) == [
        "scontrol", "update", "jobid=7", "Nice=0", "Features="]


def test_sacct_parsable_uses_unit_separator_and_header() -> None:
    argv = commands.sacct_parsable(since="now-1hour", until="now")
    assert argv[:5] == ["sacct", "-a", "-X", "-P", "--delimiter=\x1f"]
    assert argv[5:9] == ["-S", "now-1hour", "-E", "now"]
    assert argv[9] == "-o" and argv[10].split(",") == list(commands.SACCT_FIELDS)
    assert "-n" not in argv  # the parser maps columns by the header line


def test_sacct_for_jobs_drops_window() -> None:
    argv = commands.sacct_parsable(job_ids=["5", "6"])
    assert "-S" not in argv and argv[argv.index("-j") + 1] == "5,6"
    assert commands.sacct_json(job_ids=["9"]) == ["sacct", "--json", "-a", "-j", "9"]


def test_simple_commands() -> None:
    assert commands.version() == ["sinfo", "--version"]
    assert commands.squeue_json() == ["squeue", "--json"]
    assert commands.sinfo_json() == ["sinfo", "--json"]
    assert commands.show_jobs() == ["scontrol", "show", "job", "-o"]
    assert commands.show_jobs("12") == ["scontrol", "show", "job", "-o", "12"]
    assert commands.show_nodes() == ["scontrol", "show", "node", "-d", "-o"]
    assert commands.show_partitions() == ["scontrol", "show", "partition", "-o"]
    assert commands.hold("3") == ["scontrol", "hold", "3"]
    assert commands.release("3") == ["scontrol", "release", "3"]
    assert commands.requeue("3") == ["scontrol", "requeue", "3"]
    assert commands.cancel("3") == ["scancel", "3"]
    assert commands.sbatch(["-J", "a b;rm -rf /", "--gpus=1"]) == [
        "sbatch", "--parsable", "-J", "a b;rm -rf /", "--gpus=1"]
    assert commands.sacctmgr_shares() == [
        "sacctmgr", "show", "assoc", "format=account,parentname,user,share", "-P", "-n"]
