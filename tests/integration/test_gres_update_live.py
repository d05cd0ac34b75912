"""A pending whole-GPU job turned into an MPS share by `scontrol update TresPerNode=` (the
adapter's JobUpdate.tres_per_node), on the real cluster: Slurm 24.11 runs it with the share
(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE); 22.05 takes the update, shows the new request, and still
allocates the whole GPU. A daemon that turned jobs into shares could do it only on the newer
release (bench/README.md, session 46)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from slurm_hase.slurm.command_backend import CommandBackend
from slurm_hase.slurm.types import JobState, JobUpdate

pytestmark = pytest.mark.slurm
SCRIPT = ("#!/bin/bash\n"
          "echo \"pct=${CUDA_MPS_ACTIVE_THREAD_PERCENTAGE:-none} gpus=${CUDA_VISIBLE_DEVICES:-none}\"\n")


def test_a_pending_gpu_job_updated_to_an_mps_share(slurm_backend: CommandBackend,
                                                   tmp_path: Path) -> None:
    out = tmp_path / "job.out"
    job_id = slurm_backend.submit(["--hold", "--gres=gpu:1", "--constraint=t4",
                                   "-o", str(out), "-e", "/dev/null"], SCRIPT)
    try:
        slurm_backend.update_job(job_id, JobUpdate(tres_per_node="gres/mps:50"))
        shown = slurm_backend.job(job_id)
        assert shown.tres_per_node == "gres/mps:50"  # both releases store the new request
        slurm_backend.release(job_id)
        deadline = time.monotonic() + 60
        while not out.is_file() or not out.read_text().strip():
            assert time.monotonic() < deadline, f"job {job_id} never wrote {out}"
            time.sleep(0.5)
    finally:
        if any(j.job_id == job_id and j.state is JobState.PENDING for j in slurm_backend.jobs()):
            slurm_backend.cancel(job_id)
    share, gpus = out.read_text().split()
    assert gpus in {f"gpus={i}" for i in range(4)}  # one GPU of the node either way
    if slurm_backend.version_tuple() >= (24, 11):
        assert share == "pct=50"  # the share Slurm allocated
    else:
        assert share == "pct=none"  # 22.05 allocated the whole GPU asked for at submission
