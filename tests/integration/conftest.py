"""Fixtures for tests against the real local Slurm cluster (marker `slurm`).

The cluster is started once per session (idempotent `up`). Where Slurm's Debian packages or root
are missing, the tests skip with the reason, unless HASE_REQUIRE_CLUSTER=1 (CI) makes that fatal.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator

import pytest

from slurm_hase.errors import HaseError
from slurm_hase.slurm.command_backend import CommandBackend
from slurm_hase.slurm.localcluster.manager import SBIN_PATH, LocalCluster
from slurm_hase.slurm.localcluster.paths import cluster_paths
from slurm_hase.slurm.localcluster.spec import load_spec
from slurm_hase.slurm.runner import SubprocessRunner


def _unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "the local Slurm cluster needs root"
    if shutil.which("slurmctld", path=f"{os.environ.get('PATH', '')}:{SBIN_PATH}") is None:
        return "Slurm is not installed (apt-get install slurm-wlm slurmdbd munge mariadb-server)"
    return None


@pytest.fixture(scope="session")
def local_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    reason = _unavailable_reason()
    if reason is not None:
        if os.environ.get("HASE_REQUIRE_CLUSTER") == "1":
            pytest.fail(f"HASE_REQUIRE_CLUSTER=1 but {reason}")
        pytest.skip(reason)
    cluster = LocalCluster(load_spec(None), cluster_paths(None))
    cluster.up()
    # the test jobs' slurm-<id>.out files go to a temporary folder, not the checkout the
    # tests run from (sbatch reads SBATCH_OUTPUT where no -o/--output is given)
    outputs = tmp_path_factory.mktemp("job-output")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SBATCH_OUTPUT", str(outputs / "slurm-%j.out"))
        yield cluster


@pytest.fixture(scope="session")
def slurm_env(local_cluster: LocalCluster) -> dict[str, str]:
    return dict(local_cluster.env)


@pytest.fixture(scope="session")
def slurm_runner(local_cluster: LocalCluster) -> SubprocessRunner:
    return SubprocessRunner(local_cluster.env)


@pytest.fixture(scope="session")
def slurm_backend(slurm_runner: SubprocessRunner) -> CommandBackend:
    return CommandBackend(slurm_runner)


@pytest.fixture
def jobs(slurm_backend: CommandBackend) -> Iterator[list[str]]:
    """Ids of the jobs a test submits; each is cancelled afterwards."""
    made: list[str] = []
    yield made
    for job_id in made:
        with contextlib.suppress(HaseError):
            slurm_backend.cancel(job_id)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "integration" in str(item.fspath):
            item.add_marker(pytest.mark.slurm)
