"""The rendered MPS prolog and epilog run by slurmd itself (slurm.conf Prolog=/Epilog=), on a
side cluster of one A100 node with the SPANK plugin: what Slurm hands the scripts (job id, user,
GPUs, the share from --gres=mps:N or --hase-mps) starts a daemon (the fake control binary's),
the job's tasks are pointed at it, and the epilog stops it when the job ends. The fake GPUs are
character device nodes (`gpu_device_nodes`): for empty regular files Slurm hands the prolog no
GPU at all. The default pipe/log directories are used, because the plugin is loaded without
arguments."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_hase.mps.render import MpsConfig, write_scripts
from slurm_hase.slurm.localcluster.manager import LocalCluster
from tests.integration.side_cluster import run_in, side_cluster
from tests.unit.test_mps_scripts import FAKE_DAEMON, FAKE_MPS, _alive, daemons

pytestmark = pytest.mark.slurm
PIPE_BASE = Path(MpsConfig.pipe_dir)
SPEC = """name = "hasempsp"
port_base = 22817
slurmd_port_base = 23001
prolog = "{prolog}"
epilog = "{epilog}"
gpu_device_nodes = true

[[nodes]]
name = "a100-1"
gpus = 2
gpu_type = "a100"
mps = 200

[[accounts]]
name = "teama"
shares = 1
users = ["root"]
"""


@pytest.fixture(scope="module")
def mps_cluster(local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[tuple[LocalCluster, Path]]:
    """The side cluster and the folder of the fake binaries' records. slurmd runs the scripts
    with its own environment, so a wrapper names the records for the fake control binary."""
    if not (Path(__file__).resolve().parents[2] / "spank" / "hase_mps.so").is_file():
        pytest.fail("spank/hase_mps.so is not built: run `make -C spank`")
    root = tmp_path_factory.mktemp("mps-prolog")
    for name, text in (("nvidia-cuda-mps-control", FAKE_MPS), ("fake-mps-daemon", FAKE_DAEMON)):
        (root / name).write_text(text)
        (root / name).chmod(0o755)
    wrapper = root / "mps-control"
    wrapper.write_text("#!/bin/bash\n"
                       f"export FAKE_MPS_RECORD={root}/record.txt FAKE_MPS_DAEMONS={root}/daemons.txt"
                       f" FAKE_MPS_DAEMON_LOG={root}/daemon-log.txt\n"
                       f'exec {root}/nvidia-cuda-mps-control "$@"\n')
    wrapper.chmod(0o755)
    scripts = write_scripts(MpsConfig(mps_control=str(wrapper), log_file=str(root / "hase-mps.log"),
                                      syslog=False, start_timeout_s=5), root / "scripts")
    spec = root / "spec.toml"
    spec.write_text(SPEC.format(prolog=scripts["prolog"], epilog=scripts["epilog"]))
    try:
        with side_cluster(local_cluster, spec, "mps-prolog") as cluster:
            yield cluster, root
    finally:
        for pid in daemons(root / "daemons.txt"):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _job(cluster: LocalCluster, root: Path, *args: str) -> str:
    """Run a batch job that prints its environment and wait for it; its job id."""
    out = root / "out-%j.txt"
    res = run_in(cluster, "sbatch", "--parsable", "--wait", "-o", str(out), *args,
                 "--wrap", "env; sleep 1", cwd=root)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip().split(";")[0]


def _records(root: Path, job_id: str) -> list[str]:
    rec = root / "record.txt"
    lines = rec.read_text().splitlines() if rec.exists() else []
    return [x for x in lines if f"pipe=[{PIPE_BASE}/{job_id}]" in x]


def _wait_gone(job_dir: Path, timeout_s: float = 30.0) -> bool:
    """The epilog runs after sbatch --wait returns: wait for it to remove the directory."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and job_dir.exists():
        time.sleep(0.2)
    return not job_dir.exists()


def _task_env(root: Path, job_id: str) -> dict[str, str]:
    text = (root / f"out-{job_id}.txt").read_text()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


@pytest.mark.parametrize(("ask", "share"), [(["--gres=mps:50"], "50"),
                                            (["--gres=gpu:1", "--hase-mps=30"], "30")],
                         ids=["gres-mps", "hase-mps"])
def test_slurmd_runs_the_prolog_and_epilog_around_an_mps_job(
        mps_cluster: tuple[LocalCluster, Path], ask: list[str], share: str) -> None:
    cluster, root = mps_cluster
    job_id = _job(cluster, root, *ask)
    calls = _records(root, job_id)
    log = (root / "hase-mps.log").read_text()
    assert calls, f"no MPS daemon started for job {job_id}; the scripts' log:\n{log}"
    start, *rest = calls
    # Slurm's GPU number (no NVIDIA driver here to map it to a UUID)
    assert start.startswith("args=[-d] ") and start.endswith("gpus=[0]"), start
    assert any(f"stdin=[set_default_active_thread_percentage {share}]" in c for c in rest), calls
    assert any("stdin=[start_server -uid 0]" in c for c in rest), calls
    env = _task_env(root, job_id)
    assert env.get("CUDA_MPS_PIPE_DIRECTORY") == f"{PIPE_BASE}/{job_id}", env
    assert env.get("CUDA_VISIBLE_DEVICES") == "0"  # the server's numbering: one GPU
    assert _wait_gone(PIPE_BASE / job_id), f"epilog left {PIPE_BASE / job_id}:\n{log}"
    assert any(c.startswith("args=[] stdin=[quit]") for c in _records(root, job_id))


def test_a_job_without_a_share_starts_no_daemon(mps_cluster: tuple[LocalCluster, Path]) -> None:
    cluster, root = mps_cluster
    job_id = _job(cluster, root, "--gres=gpu:1")
    assert _records(root, job_id) == []
    assert f"hase-mps-prolog job={job_id}: no MPS share requested; nothing to do" in \
        (root / "hase-mps.log").read_text()
    assert "CUDA_MPS_PIPE_DIRECTORY" not in _task_env(root, job_id)


def test_on_the_second_gpu_the_tasks_see_the_servers_device_0(
        mps_cluster: tuple[LocalCluster, Path]) -> None:
    """GPU 0 is busy: the MPS job gets Slurm's GPU 1, the prolog starts the daemon on it and
    writes it to slurm-gpus, and the plugin gives the tasks device 0 (the server's numbering),
    where Slurm set CUDA_VISIBLE_DEVICES=1."""
    cluster, root = mps_cluster
    holder = run_in(cluster, "sbatch", "--parsable", "-o", "/dev/null", "--gres=gpu:1",
                    "--wrap", "sleep 120", cwd=root)
    assert holder.returncode == 0, holder.stderr
    try:
        job_id = _job(cluster, root, "--gres=mps:50")
    finally:
        run_in(cluster, "scancel", holder.stdout.strip(), cwd=root)
    (start, *_rest) = _records(root, job_id)
    assert start.startswith("args=[-d] ") and start.endswith("gpus=[1]"), start
    env = _task_env(root, job_id)
    assert env.get("SLURM_JOB_GPUS") == "1" and env.get("CUDA_VISIBLE_DEVICES") == "0", env
    assert _wait_gone(PIPE_BASE / job_id)
