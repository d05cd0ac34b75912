"""The sbatch argv scanner: script position, values, abbreviations, our --hase-* options."""

from __future__ import annotations

import pytest

from slurm_hase.errors import DescriptorError
from slurm_hase.hsbatch.argv import split_argv
from slurm_hase.hsbatch.sbatch_opts import resolve_for, resolve_long, scan


@pytest.mark.parametrize(
    ("argv", "script"),
    [
        (["job.sh"], 0),
        (["-J", "x", "job.sh", "a"], 2),
        (["-Jx", "job.sh"], 1),
        (["--job-name", "job.sh", "real.sh"], 2),  # the value looks like a script
        (["--job-name=job.sh", "real.sh"], 1),
        (["-HQ", "-p", "gpu", "job.sh"], 3),  # clustered flags
        (["-kv", "job.sh"], 1),  # -k takes an optional attached value
        (["--nice", "job.sh"], 1),  # optional values only with '='
        (["--exclusive", "job.sh"], 1),
        (["--wrap", "echo hi"], None),
        (["--par=gpu", "-t", "10", "--", "-weird.sh"], 4),
        (["--", "job.sh"], 1),
        (["-N1", ":", "-n2", "job.sh"], 3),
        (["--bogus", "job.sh"], 1),  # unknown options take no value (sbatch rejects them)
        (["--gres", "gpu:1"], None),
        (["-"], 0),
        (["-J"], None),
    ],
)
def test_script_position(argv: list[str], script: int | None) -> None:
    assert scan(argv).script_index == script


def test_values_and_canonical_names() -> None:
    sc = scan(["-Gv100:2", "--gpus-per-node=2", "--const", "a100", "-t1:00", "x.sh", "-C", "z"])
    assert sc.last("gpus") == "v100:2"
    assert sc.last("constraint") == "a100"  # -C after the script is a script argument
    assert sc.last("time") == "1:00"
    assert sc.script_index == 5
    assert scan(["-tw", "1:00"]).script_index == 1  # -tw: the time is "w"


def test_abbreviations() -> None:
    assert resolve_long("part") == "partition"
    assert resolve_long("par") is None  # parsable / partition: ambiguous
    assert resolve_long("test") == "test-only"
    assert resolve_long("nope") is None


def test_het_separator() -> None:
    sc = scan(["-N1", ":", "-N2", "job.sh"])
    assert sc.het and sc.script_index == 3


def test_split_removes_only_our_options() -> None:
    argv = ["--hase-model=resnet50", "-J", "--hase-explain", "--hase-bs", "32", "--hase-explain",
            "job.sh", "--hase-model=x"]
    rest, opts, sc = split_argv(argv)
    assert rest == ["-J", "--hase-explain", "job.sh", "--hase-model=x"]  # a value and a script arg
    assert opts.explain and opts.pairs == [("model", "resnet50"), ("bs", "32")]
    assert sc.script_index == 2


def test_split_flags_and_files() -> None:
    rest, opts, _ = split_argv(["--hase-descriptor", "d.txt", "--hase-predictor=m.json",
                                "--hase-no-constraint", "--hase-batch-size=8", "--wrap=true"])
    assert rest == ["--wrap=true"]
    assert opts.descriptor_file == "d.txt" and opts.predictor == "m.json"
    assert opts.no_constraint and opts.pairs == [("batch-size", "8")]


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--hase-frobnicate=1", "j.sh"], "unknown option --hase-frobnicate"),
        (["--hase-explain=yes", "j.sh"], "takes no value"),
        (["--hase-model"], "needs a value"),
    ],
)
def test_split_errors(argv: list[str], fragment: str) -> None:
    with pytest.raises(DescriptorError, match=fragment):
        split_argv(argv)


def test_the_release_decides_an_abbreviation_only_where_it_must() -> None:
    """--ext is --extra-node-info to sbatch 22.05 (no --extra there) and ambiguous from 23 on;
    the version is asked only for such a name, and an unknown one keeps the newest table."""
    asked: list[int] = []

    def v22() -> tuple[int, int]:
        asked.append(1)
        return (22, 5)

    assert resolve_for("ext", v22) == "extra-node-info" and asked == [1]
    assert resolve_for("extra", v22) == "extra-node-info"
    assert resolve_for("segment", v22) is None  # unrecognized there, refused by sbatch
    assert resolve_for("part", v22) == "partition" and asked == [1, 1, 1]  # not asked
    assert resolve_for("ext", lambda: (24, 11)) is None  # extra / extra-node-info
    assert resolve_for("ext", lambda: None) is None and resolve_for("ext", None) is None
    assert resolve_for("extra", lambda: (24, 11)) == "extra"
    # --power: 22.05's, gone by 24.11 (probed); --po abbreviates it only where it exists
    assert resolve_for("power", v22) == "power" and resolve_for("po", v22) == "power"
    assert resolve_for("power", lambda: (24, 11)) is None
    assert resolve_for("po", lambda: (24, 11)) is None
    sc = scan(["--ext", "4", "job.sh"], version=v22)
    assert sc.script_index == 2 and sc.last("extra-node-info") == "4"
    assert scan(["--ext", "4", "job.sh"], version=lambda: (24, 11)).script_index == 1


def test_hsbatch_asks_sbatch_its_version_once_and_only_when_needed() -> None:
    """`sbatch --version` through the runner, at most once; a failure means the newest table."""
    from slurm_hase.hsbatch.core import Deps, _sbatch_version
    from slurm_hase.slurm.runner import CommandResult

    class Runner:
        def __init__(self, code: int, out: str) -> None:
            self.code, self.out, self.calls = code, out, 0

        def run(self, argv: list[str], **_: object) -> CommandResult:
            assert argv == ["sbatch", "--version"]
            self.calls += 1
            return CommandResult(tuple(argv), self.code, self.out, "")

    good = Runner(0, "slurm-wlm 22.05.8\n")
    version = _sbatch_version(Deps(good))  # type: ignore[arg-type]
    assert good.calls == 0
    assert version() == (22, 5) and version() == (22, 5) and good.calls == 1
    _, _, sc = split_argv(["--ext", "4", "job.sh"], _sbatch_version(Deps(good)))  # type: ignore[arg-type]
    assert sc.script_index == 2 and good.calls == 2
    split_argv(["-p", "gpu", "job.sh"], _sbatch_version(Deps(good)))  # type: ignore[arg-type]
    assert good.calls == 2  # not asked: nothing depends on it
    bad = Runner(1, "")
    assert _sbatch_version(Deps(bad))() is None and bad.calls == 1  # type: ignore[arg-type]
