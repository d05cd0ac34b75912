"""MIG instance types on a real local cluster: a second cluster (tests/fixtures/slurm/
mig-cluster.toml, its own ports and folder) with a node of 4 a100 beside a node of 7
a100_1g.5gb instances, as a site names MIG 1g.5gb instances. hsbatch keeps a job off an
instance it does not fit, and `hase report` weighs instance-hours as 1/7 of an A100's."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_hase.slurm.command_backend import CommandBackend
from slurm_hase.slurm.localcluster.manager import LocalCluster
from slurm_hase.slurm.runner import SubprocessRunner
from slurm_hase.slurm.types import JobState
from tests.integration.side_cluster import BIN, run_in, side_cluster
from tests.integration.test_adapter_live import wait_for

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def mig_cluster(local_cluster: LocalCluster) -> Iterator[LocalCluster]:
    """The mig cluster, up for this module."""
    with side_cluster(local_cluster, "mig-cluster.toml", "mig-test") as cluster:
        yield cluster


def test_hsbatch_keeps_a_job_off_an_instance_it_does_not_fit(
        mig_cluster: LocalCluster, tmp_path: Path) -> None:
    script = tmp_path / "big.sh"
    # 3e9 fp16 parameters with gradients: 12 GB, over a 1g.5gb instance's 5 GB
    script.write_text("#!/bin/bash\n#SBATCH --gpus=1 -t 600 -o /dev/null --begin=now+3600\n"
                      "#HASE params=3000 precision=fp16 iterations=2000\nsleep 1\n")
    res = run_in(mig_cluster, str(BIN / "hsbatch"), "--parsable", "--hase-explain", str(script),
               cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    job_id = res.stdout.strip()
    try:
        rows = {line.split()[0]: line.split() for line in res.stderr.splitlines()
                if line.startswith("  a100")}
        assert rows["a100_1g.5gb"][2] == "5" and rows["a100_1g.5gb"][7] == "no", res.stderr
        assert "constraint added: a100\n" in res.stderr
        shown = run_in(mig_cluster, "squeue", "-h", "-j", job_id, "-o", "%f", cwd=tmp_path)
        assert shown.stdout.strip() == "a100"
    finally:
        run_in(mig_cluster, "scancel", job_id, cwd=tmp_path)


def test_report_weighs_instance_hours_as_their_part_of_the_gpu(
        mig_cluster: LocalCluster, tmp_path: Path) -> None:
    """Weights are relative to the fastest type in the report: a job on a whole A100 too."""
    backend = CommandBackend(SubprocessRunner(mig_cluster.env))
    ids = [backend.submit(["-o", "/dev/null", "-A", account, f"--gpus={gpus}", "--wrap",
                           "sleep 2"], None)
           for account, gpus in (("teamb", "a100_1g.5gb:2"), ("teama", "a100:1"))]
    wait_for("both jobs in sacct, whole", lambda: len([
        r for r in backend.accounting(job_ids=ids)
        if r.state is JobState.COMPLETED and r.end_time and r.eligible_time]) == 2 or None)
    res = run_in(mig_cluster, str(BIN / "hase"), "report", "usage", "--since", "now-1hours",
               "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["speed_weights"]["a100_1g.5gb"] == pytest.approx(1 / 7)
    assert "a100_1g.5gb" not in out["defaulted_weights"]
    teamb = next(a for a in out["accounts"] if a["account"] == "teamb")
    hours = teamb["gpu_hours"]["a100_1g.5gb"]
    assert hours > 0 and teamb["norm_gpu_hours"] == pytest.approx(hours / 7, rel=0.02)
