"""The hase_mps SPANK plugin loaded by the real local cluster (needs plugstack.conf wired).

plugstack.conf (PlugStackConfig= in slurm.conf) must hold:
    required <repo>/spank/hase_mps.so pipe_dir=/tmp/hase-mps log_dir=/tmp/hase-mps-log
after `make -C spank`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hase.slurm.runner import CommandResult, SubprocessRunner

pytestmark = pytest.mark.slurm

NOT_LOADED = ("hase_mps SPANK plugin is not loaded: build it with `make -C spank` and add "
              "`required {so} pipe_dir=/tmp/hase-mps log_dir=/tmp/hase-mps-log` to plugstack.conf")


def _check_loaded(res: CommandResult) -> None:
    if "unrecognized option" in res.stderr and "hase-mps" in res.stderr:
        so = Path(__file__).resolve().parents[2] / "spank" / "hase_mps.so"
        pytest.fail(NOT_LOADED.format(so=so) + f"\nstderr: {res.stderr}")


def _env(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def test_srun_hase_mps_sets_task_env(slurm_runner: SubprocessRunner) -> None:
    res = slurm_runner.run(["srun", "-N1", "-n1", "--hase-mps=50", "--hase-share-tag=t1", "env"],
                           timeout_s=120)
    _check_loaded(res)
    assert res.returncode == 0, res.stderr
    env = _env(res.stdout)
    job = env["SLURM_JOB_ID"]
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert env["SLURM_HASE_MPS"] == "50"
    assert env["SLURM_HASE_SHARE_TAG"] == "t1"
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == f"/tmp/hase-mps/{job}"
    assert env["CUDA_MPS_LOG_DIRECTORY"] == f"/tmp/hase-mps-log/{job}"


def test_srun_without_option_sets_nothing(slurm_runner: SubprocessRunner) -> None:
    res = slurm_runner.run(["srun", "-N1", "-n1", "env"], timeout_s=120)
    assert res.returncode == 0, res.stderr
    env = _env(res.stdout)
    assert "SLURM_HASE_MPS" not in env and "CUDA_MPS_PIPE_DIRECTORY" not in env


@pytest.mark.parametrize("argv0", ["srun", "sbatch"])
def test_bad_percent_fails_clearly(slurm_runner: SubprocessRunner, argv0: str) -> None:
    cmd = [argv0, "-N1", "--hase-mps=0"] + (["true"] if argv0 == "srun" else ["--wrap", "true"])
    res = slurm_runner.run(cmd, timeout_s=120)
    _check_loaded(res)
    assert res.returncode != 0
    assert "--hase-mps=0 is invalid" in res.stderr and "from 1 to 100" in res.stderr


def test_sbatch_registers_option(slurm_runner: SubprocessRunner, tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    res = slurm_runner.run(["sbatch", "-N1", "--wait", "--hase-mps=25", "-o", str(out),
                            "--wrap", "env"], timeout_s=180)
    _check_loaded(res)
    assert res.returncode == 0, res.stderr
    env = _env(out.read_text())
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
