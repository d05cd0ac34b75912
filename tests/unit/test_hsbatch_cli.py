"""The console entry: as a program it exits without teardown, yet relays every byte and the code."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from slurm_hase.hsbatch import cli
from slurm_hase.slurm.runner import SubprocessRunner

OUT = "Submitted batch job 7\n"  # stays in stdout's buffer (a pipe) unless hsbatch flushes


def fake_sbatch(tmp_path: Path) -> Path:
    exe = tmp_path / "sbatch"
    exe.write_text("#!/bin/sh\n"
                   f"printf '{OUT.strip()}\\n'\necho \"args: $*\" >&2\nexit 3\n")
    exe.chmod(0o755)
    return exe


def test_program_relays_everything_then_exits_fast(tmp_path: Path) -> None:
    runner = SubprocessRunner({"HSBATCH_SBATCH": str(fake_sbatch(tmp_path)),
                               "PYTHONUNBUFFERED": ""})  # block-buffered stdout, as usual
    r = runner.run([sys.executable, "-m", "slurm_hase.hsbatch.cli", "--hase-explain", "-J", "x",
                    "--wrap=true"], timeout_s=60)
    assert r.returncode == 3
    assert r.stdout == OUT
    assert "args: -J x --wrap=true" in r.stderr and "no workload description" in r.stderr


def test_called_with_argv_returns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HSBATCH_SBATCH", str(fake_sbatch(tmp_path)))
    assert cli.main(["--wrap=true"]) == 3  # in-process callers get the code back
    out, err = capfd.readouterr()
    assert out == OUT and "args: --wrap=true" in err
