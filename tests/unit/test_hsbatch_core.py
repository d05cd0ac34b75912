"""hsbatch's flow with a fake runner, cluster and predictor: what reaches sbatch, exactly once."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from slurm_hase.errors import PredictorError, SlurmCommandError, SlurmUnavailableError
from slurm_hase.hsbatch.core import Deps, Io, run
from slurm_hase.predict.api import Prediction
from slurm_hase.predict.descriptor import WorkloadDescriptor
from slurm_hase.slurm.runner import CommandResult, Runner
from slurm_hase.slurm.types import Node, Partition

NODES = [
    Node(f"{t}-{i}", "IDLE", features=(t, g), partitions=("gpu",) + (("debug",) if t == "t4" else ()),
         gpus={t: 4}) for t, g in (("a100", "ampere"), ("v100", "volta"), ("t4", "turing"))
    for i in (1, 2)
]
PARTS = [Partition("gpu", default=True), Partition("debug")]
ITER_S = {"a100": 0.1, "v100": 0.3, "t4": 1.0}


@dataclass
class FakeRunner:
    result: CommandResult = CommandResult(("sbatch",), 0, "Submitted batch job 7\n", "")
    calls: list[tuple[list[str], str | None]] = field(default_factory=list)
    raises: Exception | None = None

    def run(self, argv: Sequence[str], *, stdin: str | None = None,
            env: Mapping[str, str] | None = None, timeout_s: float = 60.0,
            cwd: str | None = None) -> CommandResult:
        self.calls.append((list(argv), stdin))
        if self.raises is not None:
            raise self.raises
        return self.result


def fake_predictor(path: str | None):  # type: ignore[no-untyped-def]
    def predict(desc: WorkloadDescriptor, types: Sequence[str]) -> dict[str, Prediction]:
        it = desc.iterations or 0
        return {t: Prediction(t, ITER_S[t], ITER_S[t] * 1.2, ITER_S[t] * it or None,
                              ITER_S[t] * 1.2 * it or None) for t in types}
    return predict


def cluster(runner: Runner) -> tuple[list[Node], list[Partition]]:
    return NODES, PARTS


@dataclass
class Result:
    code: int
    out: str
    err: str
    calls: list[tuple[list[str], str | None]]


def hsbatch(argv: list[str], *, stdin: str = "", env: dict[str, str] | None = None,
            runner: FakeRunner | None = None, predictor=fake_predictor,  # type: ignore[no-untyped-def]
            cluster_fn=cluster) -> Result:  # type: ignore[no-untyped-def]
    r = runner or FakeRunner()
    out, err = io.StringIO(), io.StringIO()
    code = run(argv, Io(lambda: stdin, out, err, env or {}),
               Deps(runner=r, cluster=cluster_fn, predictor=predictor))
    return Result(code, out.getvalue(), err.getvalue(), r.calls)


def script(tmp_path: Path, body: str, name: str = "job.sh") -> str:
    p = tmp_path / name
    p.write_text("#!/bin/bash\n" + body + "srun true\n")
    return str(p)


def test_plain_job_passes_through_untouched(tmp_path: Path) -> None:
    s = script(tmp_path, "#SBATCH -J plain\n")
    runner = FakeRunner(CommandResult(("sbatch",), 0, "42;cl\n", "sbatch: note\n"))
    r = hsbatch(["--parsable", "-p", "gpu", s, "arg 1", "--hase-x"], runner=runner)
    assert r.calls == [(["sbatch", "--parsable", "-p", "gpu", s, "arg 1", "--hase-x"], None)]
    assert (r.code, r.out, r.err) == (0, "42;cl\n", "sbatch: note\n")


def test_description_attached_and_types_constrained(tmp_path: Path) -> None:
    s = script(tmp_path, "#SBATCH --gres=gpu:1\n#SBATCH -t 10\n#HASE model=resnet50 bs=64\n"
                         "#HASE iterations=2000\n")
    r = hsbatch([s], runner=FakeRunner(), env={"HASE_SPEED_SLACK": "0"})  # no speed limit
    (argv, _), = r.calls
    assert argv[0] == "sbatch" and argv[-1] == s
    comment = argv[1].removeprefix("--comment=")
    assert WorkloadDescriptor.from_comment(comment) == WorkloadDescriptor(
        model="resnet50", batch_size=64, iterations=2000, auto_types=("a100", "v100"))
    # 2000 iterations: a100 200 s and v100 600 s finish in 10 min, t4 (2000 s) does not
    assert argv[2] == "--constraint=a100|v100"
    assert r.err == ""


def test_explicit_type_is_never_changed(tmp_path: Path) -> None:
    s = script(tmp_path, "#SBATCH -t 10\n#HASE model=resnet50 iterations=2000\n")
    r = hsbatch(["--gpus=t4:1", s])
    argv = r.calls[0][0]
    assert not any(a.startswith("--constraint") for a in argv)
    assert argv[-2:] == ["--gpus=t4:1", s] and argv[1].startswith("--comment=")


@pytest.mark.parametrize("where", ["cli", "script", "env"])
def test_user_constraint_is_kept(tmp_path: Path, where: str) -> None:
    body = "#SBATCH -G 1 -t 10\n#HASE model=resnet50 iterations=2000\n"
    if where == "script":
        body = "#SBATCH -C v100\n" + body
    s = script(tmp_path, body)
    argv = ["-C", "t4", s] if where == "cli" else [s]
    env = {"SBATCH_CONSTRAINT": "t4"} if where == "env" else {}
    r = hsbatch(argv, env=env)
    assert [a for a in r.calls[0][0] if a.startswith("--constraint")] == []


@pytest.mark.parametrize("where", ["cli", "script", "env"])
def test_preferred_features_get_no_constraint(tmp_path: Path, where: str) -> None:
    """--prefer: Slurm runs the job on preferred nodes where it can, in place of any constraint
    (seen on 22.05), so hsbatch adds none. sbatch reads no SBATCH_PREFER: in the environment
    it is no preference, and the constraint is added as usual."""
    body = "#SBATCH -G 1 -t 10\n#HASE model=resnet50 iterations=2000\n"
    if where == "script":
        body = "#SBATCH --prefer=t4\n" + body
    s = script(tmp_path, body)
    argv = ["--prefer", "t4", s] if where == "cli" else [s]
    r = hsbatch(argv, env={"SBATCH_PREFER": "t4"} if where == "env" else {})
    added = [a for a in r.calls[0][0] if a.startswith("--constraint")]
    assert bool(added) == (where == "env")
    assert r.calls[0][0][1].startswith("--comment=")  # the description is attached as ever


@pytest.mark.parametrize("how", [["--comment", "mine"], []])
def test_user_comment_is_not_clobbered(tmp_path: Path, how: list[str]) -> None:
    s = script(tmp_path, ("" if how else "#SBATCH --comment=mine\n") + "#HASE model=resnet50\n")
    r = hsbatch([*how, s])
    assert r.calls[0][0] == ["sbatch", *how, s]
    assert r.err.count("\n") == 1 and "not attached" in r.err


def test_invalid_hase_line_names_line_and_key(tmp_path: Path) -> None:
    s = script(tmp_path, "#SBATCH -J x\n#HASE model=resnet50\n#HASE batch_size=lots\n")
    r = hsbatch([s])
    assert r.code == 2 and r.calls == []
    assert "job.sh line 4" in r.err and "batch_size" in r.err and "nothing submitted" in r.err


@pytest.mark.parametrize(
    ("line", "fragment"),
    [("#HASE colour=blue", "colour: unknown key"), ("#HASE model", "not key=value"),
     ("#HASE bs=1 batch_size=2", "given twice"), ("#HASE model=x" + "y" * 2000, "oversized"),
     ("#HASE model=not-in-table", "gflops"),
     ("#HASE precison=fp16", "precison: unknown key (did you mean precision?"),
     ("#HASE model=resnet5O", "'resnet5O' is not in the model table (did you mean resnet50")],
)
def test_bad_lines(tmp_path: Path, line: str, fragment: str) -> None:
    r = hsbatch([script(tmp_path, line + "\n")])
    assert r.code == 2 and r.calls == [] and fragment in r.err and "line 2" in r.err


def test_oversized_descriptor_file_refused(tmp_path: Path) -> None:
    d = tmp_path / "desc.txt"
    d.write_text("model=resnet50\n" + "# padding\n" * 10000)
    r = hsbatch(["--hase-descriptor", str(d), "--wrap=true"])
    assert r.code == 2 and r.calls == [] and "oversized" in r.err


def test_descriptor_sources_precedence(tmp_path: Path) -> None:
    d = tmp_path / "d.json"
    d.write_text('{"model": "resnet50", "bs": 16, "iterations": 5}')
    s = script(tmp_path, "#HASE batch_size=32\n")
    r = hsbatch([f"--hase-descriptor={d}", "--hase-iterations", "9", s])
    comment = r.calls[0][0][1].removeprefix("--comment=")
    assert WorkloadDescriptor.from_comment(comment) == WorkloadDescriptor(
        model="resnet50", batch_size=32, iterations=9)


@pytest.mark.parametrize(("script_line", "options", "iterations"), [
    ("#HASE iterations=20000\n", ["--hase-epochs=90", "--hase-steps-per-epoch=50"], 4500),
    ("#HASE epochs=90 steps_per_epoch=50\n", ["--hase-iterations=20000"], 20000),
    ("#HASE epochs=90 steps_per_epoch=50\n", ["--hase-epochs=10"], 500),
])
def test_a_later_source_replaces_the_run_length_given_the_other_way(
        tmp_path: Path, script_line: str, options: list[str], iterations: int) -> None:
    """docs/hsbatch.md's example script says '#HASE iterations=20000  # or: epochs=90
    steps_per_epoch=5000'; '--hase-epochs=90 --hase-steps-per-epoch=5000' on the command line
    (which wins) was refused: 'give either iterations or epochs+steps_per_epoch, not both'."""
    s = script(tmp_path, "#HASE model=resnet50\n" + script_line)
    r = hsbatch([*options, s])
    assert r.code == 0, r.err
    comment = r.calls[0][0][1].removeprefix("--comment=")
    assert WorkloadDescriptor.from_comment(comment).iterations == iterations


def test_both_run_lengths_in_one_source_are_still_refused(tmp_path: Path) -> None:
    r = hsbatch(["--hase-iterations=9", "--hase-epochs=2", "--hase-steps-per-epoch=3",
                 script(tmp_path, "#HASE model=resnet50\n")])
    assert r.code == 2 and r.calls == [] and "not both" in r.err


def boom_predictor(path: str | None):  # type: ignore[no-untyped-def]
    raise PredictorError("model file: missing the p50 booster")


def no_module(path: str | None):  # type: ignore[no-untyped-def]
    raise ImportError("No module named 'slurm_hase.predict.modelfile'")


def unreachable(runner: Runner) -> tuple[list[Node], list[Partition]]:
    raise SlurmUnavailableError(["scontrol"], 1, "Unable to contact slurm controller")


@pytest.mark.parametrize(("pred", "clus"), [(boom_predictor, cluster), (no_module, cluster),
                                            (fake_predictor, unreachable)])
def test_fail_open_submits_with_the_description_and_no_constraint(  # type: ignore[no-untyped-def]
        tmp_path: Path, pred, clus) -> None:
    s = script(tmp_path, "#SBATCH --gres=gpu:1 -t 5\n#HASE model=resnet50 iterations=100 "
               "checkpoint=yes\n")
    r = hsbatch(["--hase-explain", "-J", "j", s], predictor=pred, cluster_fn=clus)
    assert len(r.calls) == 1
    argv = r.calls[0][0]
    assert argv[-3:] == ["-J", "j", s] and "--requeue" in argv
    assert not any(a.startswith("--constraint") for a in argv)
    comments = [a for a in argv if a.startswith("--comment=")]
    assert len(comments) == 1 and json.loads(comments[0].removeprefix("--comment="))["model"] \
        == "resnet50"
    assert r.code == 0 and r.out == "Submitted batch job 7\n"
    assert r.err.count("\n") == 1 and r.err.startswith("hsbatch: warning:")
    assert "without a GPU-type constraint (the description is attached)" in r.err


def test_corrupt_model_file_fails_open(tmp_path: Path) -> None:
    from slurm_hase.hsbatch.judge import load_predict as _load_predict

    bad = tmp_path / "model.json"
    bad.write_text('{"format": "slurm-hase-predictor", "version": 1, "boost')
    s = script(tmp_path, "#SBATCH -G 1 -t 5\n#HASE model=resnet50 iterations=100\n")
    r = hsbatch([f"--hase-predictor={bad}", s], predictor=_load_predict)
    assert len(r.calls) == 1 and r.calls[0][0][-1] == s and "predictor failed" in r.err
    assert not any(a.startswith("--constraint") for a in r.calls[0][0])


def test_script_from_stdin_is_passed_exactly() -> None:
    text = "#!/bin/sh\n#SBATCH -G 1\n#HASE model=resnet50\r\necho 'ünï' $HOME\n"
    r = hsbatch(["-H"], stdin=text)
    ((argv, stdin),) = r.calls
    assert stdin == text and argv[-1] == "-H" and argv[1].startswith("--comment=")


def test_non_utf8_stdin_is_passed_not_refused() -> None:
    text = b"#!/bin/sh\necho \xff\n".decode("utf-8", "surrogateescape")
    r = hsbatch([], stdin=text)
    assert r.code == 0 and r.calls == [(["sbatch"], text)] and r.err == ""


def test_test_only_and_wrap_add_nothing(tmp_path: Path) -> None:
    s = script(tmp_path, "#SBATCH -G 1\n#HASE model=resnet50\n")
    assert hsbatch(["--test-only", s]).calls[0][0] == ["sbatch", "--test-only", s]
    r = hsbatch(["--wrap", "hostname"])
    assert r.calls == [(["sbatch", "--wrap", "hostname"], None)]


def test_help_appends_our_options() -> None:
    runner = FakeRunner(CommandResult(("sbatch",), 0, "Usage: sbatch\n", ""))
    r = hsbatch(["--hase-explain", "--help"], runner=runner)
    assert r.calls == [(["sbatch", "--help"], None)]
    assert r.out.startswith("Usage: sbatch\n") and "--hase-explain" in r.out


def test_help_shows_our_options_even_when_sbatch_cannot_print_its_own() -> None:
    # a login node without a Slurm configuration: sbatch --help dies with a fatal error
    runner = FakeRunner(CommandResult(("sbatch",), 1, "",
                                      "sbatch: fatal: Could not establish a configuration source\n"))
    r = hsbatch(["--help"], runner=runner)
    assert r.code == 1  # sbatch's exit code stands
    assert "--hase-explain" in r.out and "sbatch --help failed (exit 1)" in r.err
    assert "Could not establish a configuration source" in r.err


def test_explain_goes_to_stderr(tmp_path: Path) -> None:
    s = script(tmp_path, "#SBATCH -G 2 -t 1:00:00\n#HASE model=resnet50 iterations=10000\n")
    r = hsbatch(["--parsable", "--hase-explain", s])
    assert r.out == "Submitted batch job 7\n"
    assert "a100" in r.err and "t4" in r.err and "constraint added: a100\n" in r.err
    assert "fast" in r.err.splitlines()[1]  # the speed column


def test_partition_limits_types(tmp_path: Path) -> None:
    s = script(tmp_path, "#SBATCH -G 1 -t 10\n#HASE model=resnet50 iterations=2000\n")
    r = hsbatch(["-p", "debug", s])  # only t4 there, and it is predicted too slow
    assert [a for a in r.calls[0][0] if a.startswith("--constraint")] == []


def test_late_hase_line_warns(tmp_path: Path) -> None:
    s = script(tmp_path, "echo start\n#HASE model=resnet50\n")
    r = hsbatch([s])
    assert r.calls[0][0] == ["sbatch", s] and "line 3" in r.err


def test_exit_codes_relayed() -> None:
    assert hsbatch(["--wrap=x"], runner=FakeRunner(CommandResult((), 1, "", "sbatch: error\n"))).code == 1
    assert hsbatch(["--wrap=x"], runner=FakeRunner(CommandResult((), -9, "", ""))).code == 137
    missing = FakeRunner(raises=SlurmCommandError(["sbatch"], 127, "sbatch: command not found"))
    r = hsbatch(["--wrap=x"], runner=missing)
    assert r.code == 127 and "command not found" in r.err and len(r.calls) == 1


def test_metacharacters_are_literal(tmp_path: Path) -> None:
    d = tmp_path / "a b;$(touch x)&'\"*|<>`"
    d.mkdir()
    s = script(d, "#HASE model=resnet50\n", name="j;$HOME `id`.sh")
    desc = d / "d $x;.txt"
    desc.write_text("bs=8\n")
    name = "n;$(rm -rf /) 'q' \"dq\" `id` *"
    r = hsbatch(["-J", name, f"--hase-descriptor={desc}", s, "$1", ";"])
    argv = r.calls[0][0]
    assert argv[2:] == ["-J", name, s, "$1", ";"]
    assert not (d / "x").exists()


@pytest.mark.parametrize(("extra", "env", "directive", "want_flag", "warns"), [
    ([], {}, "", True, False),
    (["--requeue"], {}, "", False, False),          # already asked for: not doubled
    (["--no-requeue"], {}, "", False, True),        # the user's choice wins, with a warning
    ([], {"SBATCH_NO_REQUEUE": "1"}, "", False, True),
    ([], {}, "#SBATCH --no-requeue\n", False, True),
    (["--requeue"], {}, "#SBATCH --no-requeue\n", False, False),  # command line beats script
])
def test_checkpoint_makes_the_job_requeueable(tmp_path: Path, extra: list[str],
                                              env: dict[str, str], directive: str,
                                              want_flag: bool, warns: bool) -> None:
    s = script(tmp_path, f"#SBATCH --gres=gpu:1\n{directive}#HASE model=resnet50 checkpoint=yes\n")
    r = hsbatch([*extra, s], env=env)
    (argv, _), = r.calls
    comment = next(a for a in argv if a.startswith("--comment=")).removeprefix("--comment=")
    desc = WorkloadDescriptor.from_comment(comment)
    assert desc is not None and desc.checkpoint
    added = [a for a in argv[:argv.index(s)] if a == "--requeue" and a not in extra]
    assert bool(added) == want_flag and argv.count("--requeue") <= 1
    assert ("--no-requeue" in r.err) == warns



@pytest.mark.parametrize(("slack", "want"), [("", "a100"), ("2", "a100|v100"), ("9", None),
                                             ("0", None), ("bogus", "a100"), ("-1", "a100"),
                                             ("1e7", "a100"), ("inf", "a100")])
def test_speed_slack_narrows_and_marks_the_constraint(tmp_path: Path, slack: str,
                                                      want: str | None) -> None:
    # a100 0.1 s, v100 0.3 s, t4 1.0 s per iteration; no time limit: only speed can narrow
    s = script(tmp_path, "#SBATCH --gres=gpu:1\n#HASE model=resnet50\n")
    r = hsbatch([s], env={"HASE_SPEED_SLACK": slack} if slack else {})
    (argv, _), = r.calls
    comment = argv[1].removeprefix("--comment=")
    desc = WorkloadDescriptor.from_comment(comment)
    assert desc is not None
    got = next((a.removeprefix("--constraint=") for a in argv if a.startswith("--constraint=")),
               None)
    assert got == want
    assert desc.auto_types == (tuple(want.split("|")) if want else ())
    bad = slack in ("bogus", "-1", "1e7", "inf")
    assert ("HASE_SPEED_SLACK=" in r.err) == bad  # a bad value is warned


def test_no_speed_narrowing_when_the_description_cannot_be_attached(tmp_path: Path) -> None:
    s = script(tmp_path, "#SBATCH --gres=gpu:1\n#HASE model=resnet50\n")
    r = hsbatch(["--comment=mine", s])
    (argv, _), = r.calls
    assert not any(a.startswith("--constraint") for a in argv)  # the daemon could not undo it


@pytest.mark.parametrize("how", ["line", "option", "file"])
def test_users_cannot_set_auto_types(tmp_path: Path, how: str) -> None:
    """auto_types marks a constraint as hsbatch's own (the daemon may change it): a user who set
    it would hand their own --constraint to the daemon, so it is refused from every source."""
    line = "#HASE model=resnet50 at=t4\n" if how == "line" else "#HASE model=resnet50\n"
    s = script(tmp_path, "#SBATCH --constraint=t4\n" + line)
    argv = [s]
    if how == "option":
        argv = ["--hase-auto-types=t4", s]
    elif how == "file":
        d = tmp_path / "d.txt"
        d.write_text("auto_types=t4\n")
        argv = [f"--hase-descriptor={d}", s]
    r = hsbatch(argv)
    assert r.code == 2 and r.calls == []
    assert "set by hsbatch itself" in r.err and "--constraint" in r.err


def test_warns_when_no_type_can_finish_in_time(tmp_path: Path) -> None:
    """Every type's predicted runtime exceeds the limit: warned, and submitted exactly as asked."""
    s = script(tmp_path, "#SBATCH --gres=gpu:1 -t 1\n#HASE model=resnet50 iterations=1000\n")
    r = hsbatch([s])
    assert r.code == 0 and len(r.calls) == 1 and "--constraint" not in " ".join(r.calls[0][0])
    assert "no GPU type here can run this job" in r.err and "time limit of 60 s" in r.err


@pytest.mark.parametrize(("text", "fragment"), [
    ("model=resnet50\nbs=64 iterations=100\n", None),  # several pairs on a line, as on #HASE
    ("model = resnet50\nbs = 64\niterations = 100\n", None),  # one pair, spaces around '='
    ("model=resnet50 bs iterations=5\n", "'bs' is not key=value"),
    ('[{"model": "resnet50"}]', "must be a JSON object"),
])
def test_descriptor_file_forms(tmp_path: Path, text: str, fragment: str | None) -> None:
    d = tmp_path / "d.txt"
    d.write_text(text)
    r = hsbatch([f"--hase-descriptor={d}", "--wrap=true"])
    if fragment is None:
        comment = r.calls[0][0][1].removeprefix("--comment=")
        assert WorkloadDescriptor.from_comment(comment) == WorkloadDescriptor(
            model="resnet50", batch_size=64, iterations=100)
    else:
        assert r.code == 2 and r.calls == [] and fragment in r.err


@pytest.mark.parametrize(("sbatch_line", "hase_line", "want_gpus", "warns"), [
    ("#SBATCH --gres=gpu:4\n", "#HASE model=resnet50\n", 4, False),  # taken from the request
    ("#SBATCH --gpus=2\n", "#HASE model=resnet50 gpus=2\n", 2, False),
    ("#SBATCH --gpus=1\n", "#HASE model=resnet50 gpus=2\n", 2, True),  # the description wins
    ("#SBATCH -N 2 --gpus-per-node=4\n", "#HASE model=resnet50\n", 1, False),  # not plain
    ("#SBATCH --gres=gpu:1\n", "#HASE model=resnet50\n", 1, False),
])
def test_gpu_count_from_the_request(tmp_path: Path, sbatch_line: str, hase_line: str,
                                    want_gpus: int, warns: bool) -> None:
    r = hsbatch([script(tmp_path, sbatch_line + hase_line)])
    (argv, _), = r.calls
    comment = next(a for a in argv if a.startswith("--comment="))
    desc = WorkloadDescriptor.from_comment(comment.removeprefix("--comment="))
    assert desc is not None and desc.num_gpus == want_gpus
    assert ("says gpus=2 but the job asks for 1 GPU" in r.err) == warns


@pytest.mark.parametrize(("option", "hint"), [
    ("--hase-Model=resnet50", "did you mean --hase-model? "),
    ("--hase-modle=resnet50", "--hase-model"),
    ("--hase-explian", "did you mean --hase-explain"),
])
def test_a_mistyped_hase_option_gets_a_suggestion(option: str, hint: str) -> None:
    r = hsbatch([option, "--wrap=true"])
    assert r.code == 2 and r.calls == [] and hint in r.err, r.err


def test_the_spank_plugins_options_go_to_sbatch(tmp_path: Path) -> None:
    """--hase-mps and --hase-share-tag are sbatch's once slurm-hase's SPANK plugin is installed:
    hsbatch passes them on as given (a description key of the same name must not swallow them),
    and --hase-mps's share tells the description unless it says otherwise."""
    job = script(tmp_path, "#SBATCH --gpus=1\n")
    for argv in (["--hase-share-tag=t1", job], ["--hase-mps", "25", "-N1", job],
                 ["--hase-mps=25", "--hase-share-tag", "t1", job]):
        res = hsbatch(argv)
        assert res.code == 0, res.err
        assert res.calls == [(["sbatch", *argv], None)]  # nothing described: untouched
    res = hsbatch(["--hase-mps=25", "--hase-model=resnet50", "--hase-bs=64", job])
    assert res.code == 0, res.err
    [(sent, _)] = res.calls
    assert sent[-2:] == ["--hase-mps=25", job] and "--hase-model=resnet50" not in sent
    comment = next(a for a in sent if a.startswith("--comment="))
    assert json.loads(comment.split("=", 1)[1])["mps"] == 25
    res = hsbatch(["--hase-mps=25", "--hase-model=resnet50", "--hase-mps-share=50", job])
    comment = next(a for a in res.calls[0][0] if a.startswith("--comment="))
    assert json.loads(comment.split("=", 1)[1])["mps"] == 50  # the description's own wins


@pytest.mark.parametrize("given", [["--constraint="], ["-C", ""]])
def test_an_empty_constraint_is_the_users_no_constraint(tmp_path: Path, given: list[str]) -> None:
    """`--constraint=` (empty) is the user's choice of no constraint: sbatch takes the last
    one given, so hsbatch's own before it would not hold, yet its comment would record it."""
    s = script(tmp_path, "#SBATCH --gres=gpu:1\n#SBATCH -t 10\n#HASE model=resnet50 bs=64\n"
                         "#HASE iterations=2000\n")
    r = hsbatch([*given, s], env={"HASE_SPEED_SLACK": "0"})
    (argv, _), = r.calls
    assert not any(a.startswith("--constraint=") for a in argv[: -1 - len(given)])
    comment = next(a for a in argv if a.startswith("--comment=")).removeprefix("--comment=")
    assert WorkloadDescriptor.from_comment(comment).auto_types == ()


def test_unknown_option_without_script_goes_to_sbatch_without_reading_stdin() -> None:
    """`hsbatch --bogus` on a terminal used to wait for a script on stdin; sbatch refuses a bad
    option at once (or reads stdin itself for an option newer than hsbatch's table)."""
    def no_stdin() -> str:
        raise AssertionError("hsbatch read stdin")

    r = FakeRunner(result=CommandResult(("sbatch",), 255, "",
                                        "sbatch: unrecognized option '--bogus'\n"))
    out, err = io.StringIO(), io.StringIO()
    code = run(["--bogus", "-N", "1"], Io(no_stdin, out, err, {}),
               Deps(runner=r, cluster=cluster, predictor=fake_predictor))
    assert code == 255
    assert r.calls == [(["sbatch", "--bogus", "-N", "1"], None)]  # stdin: sbatch's own
    # sbatch refused it: its message alone, as plain sbatch prints it (session 42: the warning
    # that hsbatch does not know the option follows an accepted job only)
    assert err.getvalue() == "sbatch: unrecognized option '--bogus'\n"


def test_known_options_without_script_still_read_stdin() -> None:
    res = hsbatch(["-N", "1"], stdin="#!/bin/bash\nsrun true\n")
    assert res.calls == [(["sbatch", "-N", "1"], "#!/bin/bash\nsrun true\n")]


@pytest.mark.parametrize("form", ["--nodefile={}", "-F{}", "--nodefile {}", "-F {}",
                                  "--export-file={}"])
def test_option_file_read_once_reaches_sbatch_as_a_private_copy(tmp_path: Path,
                                                                form: str) -> None:
    """`--nodefile=<(...)`: sbatch's process would not have the /dev/fd/N open (and could
    not read the pipe again); it gets a copy, removed once it returns."""
    seen: list[str] = []

    class ReadingRunner(FakeRunner):
        def run(self, argv: Sequence[str], **kw):  # type: ignore[no-untyped-def,override]
            word = next(w for w in argv[1:] if "hsbatch-" in w)
            seen.append(Path(word[word.index("/"):]).read_text())
            return super().run(argv, **kw)

    r, w = os.pipe()
    os.write(w, b"v100-1\nv100-2\n")
    os.close(w)
    try:
        words = form.format(f"/dev/fd/{r}").split()
        res = hsbatch([*words, script(tmp_path, "")], runner=ReadingRunner())
    finally:
        os.close(r)
    assert res.code == 0 and seen == ["v100-1\nv100-2\n"]
    copy = next(w for w in res.calls[0][0] if "hsbatch-" in w)
    assert not Path(copy[copy.index("/"):]).exists()  # removed after sbatch returned
    assert len(res.calls[0][0]) == 1 + len(words) + 1  # same words: the script is still last


def test_regular_nodefile_is_passed_as_given(tmp_path: Path) -> None:
    nf = tmp_path / "nodes"
    nf.write_text("v100-1\n")
    res = hsbatch([f"--nodefile={nf}", script(tmp_path, "")])
    assert f"--nodefile={nf}" in res.calls[0][0]
