"""hsbatch reads a job's inputs as sbatch 22.05.8 reads them (each case checked against the real
sbatch on the local cluster): deprecated ``#SLURM`` directives, the SBATCH_* variables sbatch
reads and the ones it does not, and a script on stdin that is not UTF-8."""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from slurm_hase.hsbatch.core import Deps, Io, run
from slurm_hase.predict.descriptor import WorkloadDescriptor
from slurm_hase.slurm.runner import CommandResult, SubprocessRunner
from tests.unit.test_hsbatch_core import FakeRunner, hsbatch, script


def _comment(argv: list[str]) -> WorkloadDescriptor:
    comment = next(a for a in argv if a.startswith("--comment="))
    desc = WorkloadDescriptor.from_comment(comment.removeprefix("--comment="))
    assert desc is not None
    return desc


@pytest.mark.parametrize(("line", "option"), [
    ("#SLURM --constraint=t4\n", "--constraint"),  # sbatch: Features=t4, hsbatch's a100 won
    ("#SLURM -C t4\n", "--constraint"),
    ("#SLURM --comment=mine\n", "--comment"),  # the user's comment would have been replaced
])
def test_deprecated_slurm_directives_are_the_users(tmp_path: Path, line: str,
                                                  option: str) -> None:
    s = script(tmp_path, line + "#SBATCH -G 1 -t 10\n#HASE model=resnet50 iterations=2000\n")
    r = hsbatch([s])
    (argv, _), = r.calls
    assert not any(a.startswith(option) for a in argv[:-1]), argv


def test_deprecated_slurm_no_requeue_is_not_overridden(tmp_path: Path) -> None:
    s = script(tmp_path, "#SLURM --no-requeue\n#SBATCH -G 1\n#HASE model=resnet50 "
                         "checkpoint=yes\n")
    r = hsbatch([s])
    assert "--requeue" not in r.calls[0][0] and "with --no-requeue" in r.err


def test_sbatch_nodes_is_not_read(tmp_path: Path) -> None:
    # sbatch ignores SBATCH_NODES (NumNodes=1): the job is one node with two GPUs
    s = script(tmp_path, "#SBATCH --gpus-per-node=2\n#HASE model=resnet50\n")
    r = hsbatch([s], env={"SBATCH_NODES": "2"})
    assert _comment(r.calls[0][0]).num_gpus == 2


def test_sbatch_gpus_per_socket_asks_for_gpus(tmp_path: Path) -> None:
    # sbatch reads it (TresPerSocket=gres:gpu:1): an untyped GPU job, which gets a constraint
    s = script(tmp_path, "#SBATCH --sockets-per-node=1 -t 10\n#HASE model=resnet50 "
                         "iterations=2000\n")
    r = hsbatch([s], env={"SBATCH_GPUS_PER_SOCKET": "1"})
    assert any(a.startswith("--constraint=") for a in r.calls[0][0]), r.calls


def test_non_utf8_script_on_stdin_reaches_sbatch_byte_for_byte(tmp_path: Path) -> None:
    """sbatch takes a Latin-1 script on stdin; hsbatch used to refuse it (exit 1)."""
    got = tmp_path / "got.sh"
    exe = tmp_path / "sbatch"
    exe.write_text(f"#!/bin/sh\ncat > '{got}'\necho 'Submitted batch job 7'\n")
    exe.chmod(0o755)
    body = b"#!/bin/sh\n#SBATCH -G 1\n#HASE model=resnet50\necho caf\xe9 \xff\n"
    (tmp_path / "in.sh").write_bytes(body)
    runner = SubprocessRunner({"HSBATCH_SBATCH": str(exe)})
    r = runner.run(["/bin/sh", "-c", f"'{sys.executable}' -m slurm_hase.hsbatch.cli "
                    f"--hase-no-constraint < '{tmp_path / 'in.sh'}'"], timeout_s=60)
    assert (r.returncode, r.stdout) == (0, "Submitted batch job 7\n"), r.stderr
    assert got.read_bytes() == body


def test_qos_value_is_not_the_script(tmp_path: Path) -> None:
    # sbatch took the job; hsbatch passed --hase-model on to sbatch (exit 255, job lost)
    s = script(tmp_path, "#SBATCH -G 1\n")
    r = hsbatch(["-q", "normal", "--hase-model=resnet50", s])
    (argv, _), = r.calls
    assert argv[1].startswith("--comment=") and argv[-3:] == ["-q", "normal", s]
    r = hsbatch(["-qnormal", script(tmp_path, "#SBATCH -G 1\n#HASE model=resnet50\n")])
    assert r.calls[0][0][1].startswith("--comment=")


@pytest.mark.parametrize(("header", "argv"), [
    ("#BSUB -q debug\n", []), ("#PBS -q debug\n", []), ("#BSUB -q debug\n", ["--ignore-pbs"])])
def test_bsub_directives_are_read_by_sbatch_like_pbs(tmp_path: Path, header: str,
                                                     argv: list[str]) -> None:
    """'#BSUB -q debug' puts the job in partition debug (t4 only; sbatch 22.05 reads #BSUB as
    it reads #PBS, unless --ignore-pbs): hsbatch judged partition gpu, added --constraint=a100
    and sbatch refused that try (a FAILED job in accounting, then a second submission)."""
    s = script(tmp_path, header + "#SBATCH -G 1 -t 10\n#HASE model=resnet50 iterations=2000\n")
    r = hsbatch([*argv, s])
    (sb_argv, _), = r.calls
    assert any(a.startswith("--constraint=") for a in sb_argv) is bool(argv), sb_argv


class ReadsExportFile(FakeRunner):
    """Keeps what the --export-file sbatch is given holds while sbatch runs."""

    seen: bytes | None = None

    def run(self, argv: Sequence[str], **kw: Any) -> CommandResult:
        words = list(argv)
        for i, w in enumerate(words):
            path = (w.removeprefix("--export-file=") if w.startswith("--export-file=")
                    else words[i + 1] if w == "--export-file" else None)
            if path is not None:
                self.seen = Path(path).read_bytes()
        return super().run(argv, **kw)


@pytest.mark.parametrize("form", ["--export-file={}", "--export-file {}"])
def test_export_file_descriptor_reaches_sbatch(tmp_path: Path, form: str) -> None:
    """`sbatch --export-file=3 ... 3<envfile` reads the environment from descriptor 3; sbatch
    run by hsbatch inherits only 0-2 and failed ('Could not open user environment file 3',
    exit 1). sbatch now gets a copy of what the descriptor holds."""
    envfile = tmp_path / "env"
    envfile.write_bytes(b"A=1\0B=2\0")
    runner = ReadsExportFile()
    fd = os.open(envfile, os.O_RDONLY)
    try:
        r = hsbatch([*form.format(fd).split(), "--wrap=true"], runner=runner)
    finally:
        os.close(fd)
    assert r.code == 0 and runner.seen == b"A=1\0B=2\0", r.calls


def test_export_file_number_that_is_no_descriptor_is_a_file_name() -> None:
    # sbatch opens a file of that name when no such descriptor is open
    r = hsbatch(["--export-file=987654", "--wrap=true"])
    assert r.calls[0][0] == ["sbatch", "--export-file=987654", "--wrap=true"]


@pytest.mark.parametrize(("argv", "to_sbatch"), [
    (["-t"], ["-t"]), (["-J", "x", "--time"], ["-J", "x", "--time"]),
    (["--hase-model=resnet50", "-G"], ["-G"])])
def test_option_missing_its_value_goes_to_sbatch_without_reading_stdin(
        argv: list[str], to_sbatch: list[str]) -> None:
    """`hsbatch -t` at a terminal: sbatch says 'option requires an argument' at once (exit 255);
    hsbatch first read stdin to its end (it waited for Ctrl-D) and only then ran sbatch."""
    def no_stdin() -> str:
        raise AssertionError("stdin read")

    runner = FakeRunner(CommandResult(("sbatch",), 255, "", "sbatch: option requires an "
                                      "argument -- 't'\n"))
    out, err = io.StringIO(), io.StringIO()
    code = run(argv, Io(no_stdin, out, err, {}), Deps(runner=runner))
    assert code == 255 and runner.calls == [(["sbatch", *to_sbatch], None)]
    assert err.getvalue() == "sbatch: option requires an argument -- 't'\n"


def test_sbatch_requeue_wins_over_sbatch_no_requeue(tmp_path: Path) -> None:
    """Both set: sbatch submits a requeueable job (Requeue=1), so checkpoint=yes needs no
    warning that Slurm may not requeue it."""
    s = script(tmp_path, "#SBATCH -G 1\n#HASE model=resnet50 checkpoint=yes\n")
    r = hsbatch([s], env={"SBATCH_REQUEUE": "1", "SBATCH_NO_REQUEUE": "1"})
    assert "no-requeue" not in r.err and "--requeue" not in r.calls[0][0]
