"""The hase_mps SPANK plugin loaded by the real local cluster (needs plugstack.conf wired).

plugstack.conf (PlugStackConfig= in slurm.conf) must hold (the default directories,
pipe_dir=/run/hase-mps log_dir=/var/log/hase-mps):
    optional <repo>/spank/hase_mps.so
after `make -C spank`. The local cluster runs no MPS prolog: a test stands in for its daemon
by creating the job's control pipe while the job is held.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import pytest

from slurm_hase.slurm.runner import CommandResult, SubprocessRunner

pytestmark = pytest.mark.slurm

NOT_LOADED = ("hase_mps SPANK plugin is not loaded: build it with `make -C spank` and add "
              "`optional {so}` to plugstack.conf")
PIPE_BASE = Path("/run/hase-mps")  # the plugin's default pipe_dir


def _check_loaded(res: CommandResult) -> None:
    if "unrecognized option" in res.stderr and "hase-mps" in res.stderr:
        so = Path(__file__).resolve().parents[2] / "spank" / "hase_mps.so"
        pytest.fail(NOT_LOADED.format(so=so) + f"\nstderr: {res.stderr}")


def _env(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def test_srun_hase_mps_without_daemon_leaves_env_alone(slurm_runner: SubprocessRunner) -> None:
    """No MPS daemon for the job (no prolog here): CUDA must not look for one."""
    res = slurm_runner.run(["srun", "-N1", "-n1", "--hase-mps=50", "--hase-share-tag=t1", "env"],
                           timeout_s=120)
    _check_loaded(res)
    assert res.returncode == 0, res.stderr
    env = _env(res.stdout)
    assert "CUDA_MPS_PIPE_DIRECTORY" not in env and "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in env


HSBATCH = str(Path(sys.executable).with_name("hsbatch"))  # the venv's console script


@pytest.mark.parametrize("submit", [["sbatch"], [HSBATCH, "--hase-model=resnet50", "--hase-bs=64"]],
                         ids=["sbatch", "hsbatch"])
def test_job_with_daemon_gets_task_env(slurm_runner: SubprocessRunner, tmp_path: Path,
                                       submit: list[str]) -> None:
    """sbatch registers --hase-mps; with the job's control pipe present, its tasks get the
    per-job directories and the share. hsbatch passes the plugin's options on to sbatch (with
    a description of its own, whose --hase-* options it takes out)."""
    out = tmp_path / "out.txt"
    res = slurm_runner.run([*submit, "--parsable", "--hold", "-N1", "--hase-mps=25",
                            "--hase-share-tag=t1", "-o", str(out), "--wrap", "env"], timeout_s=60)
    _check_loaded(res)
    assert res.returncode == 0, res.stderr
    job = res.stdout.strip().split(";")[0]
    pipe = PIPE_BASE / job
    try:
        pipe.mkdir(parents=True)
        (pipe / "control").write_text("")
        assert slurm_runner.run(["scontrol", "release", job]).returncode == 0
        deadline = time.monotonic() + 120
        while slurm_runner.run(["squeue", "-h", "-j", job]).stdout.strip():
            assert time.monotonic() < deadline, f"job {job} did not finish within 120 s"
            time.sleep(0.5)
    finally:
        slurm_runner.run(["scancel", job])
        shutil.rmtree(pipe, ignore_errors=True)
    env = _env(out.read_text())
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert env["SLURM_HASE_MPS"] == "25"
    assert env["SLURM_HASE_SHARE_TAG"] == "t1"
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == f"/run/hase-mps/{job}"
    assert env["CUDA_MPS_LOG_DIRECTORY"] == f"/var/log/hase-mps/{job}"


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
