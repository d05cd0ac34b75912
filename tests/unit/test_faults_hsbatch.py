"""Fault audit: a Slurm command that cannot be started for a reason other than "not found".

SubprocessRunner turns FileNotFoundError into SlurmCommandError (exit 127) but lets every other
OSError from starting the process escape raw: a `sbatch` (or HSBATCH_SBATCH) that is not
executable, or is a folder, gives hsbatch a Python traceback instead of an `hsbatch:` error
line (test_faults_runner.py: the daemon's side).
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from slurm_hase.hsbatch.core import Deps, Io, run
from slurm_hase.slurm.runner import SubprocessRunner


@pytest.fixture
def not_executable(tmp_path: Path) -> Path:
    p = tmp_path / "sbatch"
    p.write_text("#!/bin/sh\necho 'Submitted batch job 1'\n")
    p.chmod(0o644)  # no x bit: execve answers EACCES
    return p


def test_hsbatch_with_a_sbatch_it_cannot_run_says_so_and_submits_nothing(
        not_executable: Path, tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    try:
        code = run(["--wrap", "true"], Io(lambda: "", out, err, {}),
                   Deps(runner=SubprocessRunner(), sbatch=str(not_executable)))
    except OSError as exc:
        pytest.fail(f"raw {type(exc).__name__} escapes hsbatch: {exc}")
    assert code != 0 and out.getvalue() == ""
    assert err.getvalue().startswith("hsbatch: ") and str(not_executable) in err.getvalue()

