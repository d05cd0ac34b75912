"""slurmctld stopped for the length of a `with` block, and started again after it."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from slurm_hase.slurm.localcluster.manager import LocalCluster


@contextlib.contextmanager
def slurmctld_stopped(cluster: LocalCluster, ready_s: float = 60.0) -> Iterator[None]:
    """Stop slurmctld; afterwards start it and wait up to `ready_s` for the cluster to be ready."""
    cluster.stop_service("slurmctld")
    try:
        yield
    finally:
        cluster.start_slurmctld()
        deadline = time.monotonic() + ready_s
        while time.monotonic() < deadline and not cluster.status().ready:
            time.sleep(0.5)
    assert cluster.status().ready
