"""`hase report` against the real local cluster: sacct for usage, squeue for jobs pending now."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_hase.errors import HaseError
from slurm_hase.slurm.command_backend import CommandBackend

pytestmark = pytest.mark.slurm


def test_usage_counts_held_job_as_pending_now(slurm_backend: CommandBackend,
                                              slurm_env: dict[str, str]) -> None:
    """A held job is in squeue but not in sacct's default output: the report still counts it."""
    job_id = slurm_backend.submit(["-o", "/dev/null", "-e", "/dev/null", "-A", "teamb", "--hold",
                                   "--gpus=1", "--wrap", "sleep 1"], None)
    try:
        env = {**os.environ, **slurm_env}
        hase = str(Path(sys.executable).with_name("hase"))  # the venv's console script
        res = subprocess.run([hase, "report", "usage", "--since", "now-1hours", "--json"],
                             env=env, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        accounts = {a["account"]: a for a in json.loads(res.stdout)["accounts"]}
        assert accounts["teamb"]["pending_now"] >= 1
    finally:
        with contextlib.suppress(HaseError):
            slurm_backend.cancel(job_id)
