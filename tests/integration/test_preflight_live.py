"""`hase schedd run` checks its config against the real local cluster before the first cycle:
partitions that do not exist are refused (exit 2), a GPU type without nodes is warned about."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_hase.slurm.command_backend import CommandBackend

pytestmark = pytest.mark.slurm


def _run(tmp_path: Path, slurm_env: dict[str, str], schedd: str,
         tables: str = "") -> subprocess.CompletedProcess[str]:
    cfg = tmp_path / "schedd.toml"
    cfg.write_text(f'[schedd]\n{schedd}log_format = "text"\n{tables}')
    hase = str(Path(sys.executable).with_name("hase"))  # the venv's console script
    return subprocess.run(
        [hase, "schedd", "run", "--once", "--dry-run", "--config", str(cfg),
         "--state-db", str(tmp_path / "schedd.db")],
        env={**os.environ, **slurm_env}, capture_output=True, text=True, timeout=120)


def test_partitions_that_do_not_exist_are_refused(tmp_path: Path,
                                                  slurm_env: dict[str, str]) -> None:
    res = _run(tmp_path, slurm_env, 'partitions = ["gpux"]\n')
    assert res.returncode == 2, res.stderr
    assert res.stdout == ""
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("hase: error: ")]
    assert len(errors) == 1, res.stderr
    # names what was configured and what the cluster has (partitions gpu and debug)
    assert "(gpux)" in errors[0] and "debug, gpu" in errors[0]
    assert not (tmp_path / "schedd.db").exists()  # refused before any cycle


def test_gpu_type_without_nodes_is_a_warning(tmp_path: Path, slurm_env: dict[str, str]) -> None:
    # h100 is in the GPU catalog (the config accepts it), but no node of the cluster has one
    res = _run(tmp_path, slurm_env, 'partitions = ["gpu"]\ngpu_types = ["a100", "h100"]\n')
    assert res.returncode == 0, res.stderr
    warnings = [ln for ln in res.stderr.splitlines() if ln.startswith("hase: warning: ")]
    assert warnings == ["hase: warning: [schedd] gpu_types: no node in partition gpu has h100 "
                        "(GPU types there: a100, t4, v100)"], res.stderr
    assert "# policy fair:" in res.stdout
    # text logs carry the cycle's structured fields
    assert re.search(r"cycle done .*\bpending=\d+ .*\berrors=\d+", res.stderr), res.stderr


def test_shares_are_checked_against_sacctmgrs_account_list(tmp_path: Path,
                                                           slurm_env: dict[str, str]) -> None:
    """root is an account (with its own user's share since session 42): only the typo is warned
    about (the preflight asks sacctmgr's account list, not the shares)."""
    res = _run(tmp_path, slurm_env, 'partitions = ["gpu"]\n',
               "[shares]\nteama = 2\nroot = 1\nteamz = 1\n")
    assert res.returncode == 0, res.stderr
    warnings = [ln for ln in res.stderr.splitlines() if ln.startswith("hase: warning: ")]
    assert len(warnings) == 1, res.stderr
    assert warnings[0].startswith("hase: warning: [shares] teamz: not an account in Slurm's "
                                  "associations (accounts: root, teama, teamb"), res.stderr


def test_the_local_clusters_gpus_are_counted_as_tres(slurm_backend: CommandBackend) -> None:
    """Its slurm.conf tracks gres/gpu, so no node trips the preflight's TRES check, and a node
    a cluster without it could not show a GPU in use."""
    nodes = slurm_backend.nodes()
    assert [n.name for n in nodes if sum(n.gpus.values()) > 0]
    assert not [n.name for n in nodes if n.gpus_untracked]
