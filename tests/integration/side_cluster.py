"""A second local cluster beside the default one, for a module's live tests (its own spec in
tests/fixtures/slurm/, its own ports and folder), and commands run against it."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from slurm_hase.slurm.localcluster.manager import LocalCluster
from slurm_hase.slurm.localcluster.paths import cluster_paths
from slurm_hase.slurm.localcluster.spec import load_spec

SPECS = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
BIN = Path(sys.executable).parent  # the venv's console scripts


@contextlib.contextmanager
def side_cluster(local_cluster: LocalCluster, spec: str | Path,
                 suffix: str) -> Iterator[LocalCluster]:
    """The cluster of SPECS/`spec` (or of the spec file `spec` names), up while in the block (the
    default one stays up beside it), in a folder beside the default one's named with `suffix`
    (MariaDB, running as mysql, must be able to enter it)."""
    folder = local_cluster.paths.root.parent / f"{local_cluster.paths.root.name}-{suffix}"
    cluster = LocalCluster(load_spec(SPECS / spec), cluster_paths(folder))
    cluster.down()  # one a run killed mid-way left up
    # a fresh cluster, its accounting included: a node an earlier run left drained (a failed
    # epilog) would keep it from becoming ready, and a fresh controller alone would reuse job
    # ids that the kept accounting already holds
    shutil.rmtree(folder, ignore_errors=True)
    try:
        cluster.up()  # a start that fails half-way is stopped as well
        yield cluster
    finally:
        cluster.down()


def run_in(cluster: LocalCluster, *argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a command with the cluster's environment (its SLURM_CONF)."""
    return subprocess.run(list(argv), env={**os.environ, **cluster.env}, cwd=cwd,
                          capture_output=True, text=True, timeout=120)
