"""The Slurm adapter against the real local cluster (`hase cluster up`): every call for real."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest

from slurm_hase.errors import HaseError, JobNotFoundError, SlurmCommandError
from slurm_hase.reports.window import stamp
from slurm_hase.slurm.command_backend import CommandBackend
from slurm_hase.slurm.runner import SubprocessRunner
from slurm_hase.slurm.tres import format_gpu_tres
from slurm_hase.slurm.types import AccountingRecord, GpuRequest, Job, JobState, JobUpdate
from tests.conftest import REPO

pytestmark = pytest.mark.slurm
T = TypeVar("T")
QUIET = ["-o", "/dev/null", "-e", "/dev/null"]


def wait_for(what: str, probe: Callable[[], T | None], timeout_s: float = 60.0) -> T:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = probe()
        if got is not None:
            return got
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def submit(slurm_backend: CommandBackend) -> Iterator[Callable[..., str]]:
    """sbatch through the backend; every job it made is cancelled afterwards."""
    made: list[str] = []

    def _submit(*args: str, script: str | None = None) -> str:
        job_id = slurm_backend.submit([*QUIET, *args], script)
        made.append(job_id)
        return job_id

    yield _submit
    for job_id in made:
        with contextlib.suppress(HaseError):
            slurm_backend.cancel(job_id)


def live(backend: CommandBackend, job_id: str) -> Job | None:
    return next((j for j in backend.jobs() if j.job_id == job_id), None)


def test_version_nodes_partitions_shares(slurm_backend: CommandBackend) -> None:
    # what the cluster itself reports, e.g. "slurm-wlm 22.05.8"
    reported = slurm_backend.runner.run(["sinfo", "--version"]).check().stdout
    m = re.search(r"^slurm(?:-wlm)? (\d+)\.(\d+)\.(\d+)$", reported, re.MULTILINE)
    assert m is not None, reported
    assert slurm_backend.version_tuple() == (int(m[1]), int(m[2]))
    assert slurm_backend.version() == f"{m[1]}.{m[2]}.{m[3]}"
    assert slurm_backend.version_tuple() >= (22, 5)
    nodes = {n.name: n for n in slurm_backend.nodes()}
    assert set(nodes) == {"a100-1", "a100-2", "v100-1", "v100-2", "t4-1", "t4-2"}
    for name, node in nodes.items():
        gpu_type = name.split("-")[0]
        assert node.gpus == {gpu_type: 4} and node.mps_total == 400, name
        assert gpu_type in node.features and "gpu" in node.partitions
    parts = {p.name: p for p in slurm_backend.partitions()}
    assert parts["gpu"].default and not parts["debug"].default
    assert set(parts["gpu"].nodes) == set(nodes)
    # default_cluster.toml: teama shares = 60, teamb shares = 40
    shares = slurm_backend.account_shares()
    assert {a: shares.get(a) for a in ("teama", "teamb")} == {"teama": 60.0, "teamb": 40.0}
    # sacctmgr's account list has root too; its share is its own user's (root||root|1), a
    # sibling of teama and teamb in Slurm's tree (session 42: it was left out)
    assert {"root", "teama", "teamb"} <= slurm_backend.accounts() and shares["root"] == 1.0


def test_account_shares_follow_the_account_tree(slurm_backend: CommandBackend,
                                                slurm_runner: SubprocessRunner) -> None:
    """A share counts against its siblings only: physics (1, beside teama 60, teamb 40 and
    root's user root 1) with physa (3) and its own user (2) below it gives physa 1 x 3/5 and
    physics 1 x 2/5 of root's 102, whatever physa's 3 would be beside teama's 60."""
    made = [["add", "account", "physics", "parent=root", "fairshare=1"],
            ["add", "account", "physa", "parent=physics", "fairshare=3"],
            ["add", "user", "root", "account=physics", "fairshare=2"],
            ["add", "user", "root", "account=physa", "fairshare=1"]]
    try:
        for words in made:
            slurm_runner.run(["sacctmgr", "-i", *words]).check()
        shares = slurm_backend.account_shares()
        assert {a: shares.get(a) for a in ("physics", "physa", "teama", "teamb")} == \
            pytest.approx({"physics": 0.4, "physa": 0.6, "teama": 60.0, "teamb": 40.0})
    finally:
        for words in (["delete", "user", "root", "account=physa"],
                      ["delete", "user", "root", "account=physics"],
                      ["delete", "account", "physa"], ["delete", "account", "physics"]):
            slurm_runner.run(["sacctmgr", "-i", *words])
    assert "physa" not in slurm_backend.account_shares()


def test_held_job_is_pending_with_typed_request(slurm_backend: CommandBackend,
                                                 submit: Callable[..., str]) -> None:
    job_id = submit("-J", "it-held", "-A", "teama", "--hold", "--gpus=t4:1",
                    script="#!/bin/sh\nsleep 60\n")
    job = wait_for("held job in squeue", lambda: live(slurm_backend, job_id))
    assert job.pending and job.held and job.account == "teama" and job.name == "it-held"
    assert job.gpu == GpuRequest(1, "t4", "job")
    assert job.tres_per_job == format_gpu_tres(1, "t4", slurm_backend.version_tuple())
    assert slurm_backend.job(job_id) == job  # scontrol text and squeue JSON agree live


def test_update_nice_features_comment_and_read_back(slurm_backend: CommandBackend,
                                                     submit: Callable[..., str]) -> None:
    job_id = submit("-J", "it-upd", "-A", "teamb", "--hold", "--gres=gpu:1", "--wrap", "sleep 60")
    comment = '{"v":1, "model": "resnet 50", "bs": 64}'
    slurm_backend.update_job(job_id, JobUpdate(nice=50, features="t4|v100", comment=comment))
    job = slurm_backend.job(job_id)
    assert (job.nice, job.features, job.comment) == (50, "t4|v100", comment)
    assert job.gpu == GpuRequest(1, None, "node")
    from_squeue = live(slurm_backend, job_id)
    assert from_squeue is not None and from_squeue.comment == comment
    assert from_squeue.nice == 50 and from_squeue.features == "t4|v100"
    slurm_backend.update_job(job_id, JobUpdate(features="volta"))
    assert slurm_backend.job(job_id).features == "volta"


def test_typed_gres_update_depends_on_version(slurm_backend: CommandBackend,
                                              submit: Callable[..., str]) -> None:
    """GUIDE §2: untyped -> typed TresPerNode is refused by 22.05, accepted from 23.11."""
    version = slurm_backend.version_tuple()
    job_id = submit("-J", "it-retype", "--hold", "--gres=gpu:1", "--wrap", "sleep 60")
    update = JobUpdate(tres_per_node=format_gpu_tres(1, "t4", version))
    if version < (23, 11):
        with pytest.raises(SlurmCommandError, match="Invalid GRES"):
            slurm_backend.update_job(job_id, update)
    else:
        slurm_backend.update_job(job_id, update)
        assert slurm_backend.job(job_id).gpu == GpuRequest(1, "t4", "node")


def test_hold_and_release(slurm_backend: CommandBackend, submit: Callable[..., str]) -> None:
    job_id = submit("-J", "it-hold", "--begin=now+3600", "--gpus=1", "--wrap", "sleep 60")
    assert not slurm_backend.job(job_id).held
    slurm_backend.hold(job_id)
    assert slurm_backend.job(job_id).held
    slurm_backend.release(job_id)
    job = slurm_backend.job(job_id)
    assert not job.held and job.pending


def test_cancel_removes_job_from_queue(slurm_backend: CommandBackend,
                                       submit: Callable[..., str]) -> None:
    job_id = submit("-J", "it-cancel", "--hold", "--gpus=1", "--wrap", "sleep 60")
    slurm_backend.cancel(job_id)
    wait_for("job gone", lambda: True if live(slurm_backend, job_id) is None else None, 20)
    assert slurm_backend.job(job_id).state is JobState.CANCELLED  # still in slurmctld memory


def test_vanished_jobs_raise_job_not_found(slurm_backend: CommandBackend,
                                           submit: Callable[..., str]) -> None:
    with pytest.raises(JobNotFoundError):
        slurm_backend.update_job("99999999", JobUpdate(nice=5))
    with pytest.raises(JobNotFoundError):
        slurm_backend.job("99999999")
    for verb in (slurm_backend.hold, slurm_backend.release, slurm_backend.requeue):
        with pytest.raises(JobNotFoundError):
            verb("99999999")
    job_id = submit("-J", "it-gone", "--hold", "--gpus=1", "--wrap", "sleep 60")
    slurm_backend.cancel(job_id)
    with pytest.raises(JobNotFoundError):
        slurm_backend.update_job(job_id, JobUpdate(nice=5))


def test_short_job_runs_and_is_accounted_with_gpu_type(slurm_backend: CommandBackend,
                                                       submit: Callable[..., str]) -> None:
    job_id = submit("-J", "it-short", "-A", "teamb", "--gpus=a100:1", "--wrap", "sleep 1")

    def finished() -> list[AccountingRecord] | None:
        # slurmdbd fills a record in steps: clean-clone CI runs read COMPLETED with End=Unknown,
        # and COMPLETED with an end time but JobName=allocation, no partition and no ReqTRES
        # yet, or Eligible=Unknown (then sacct -S/-E lists it in no window): wait until the
        # record is whole
        recs = slurm_backend.accounting(job_ids=[job_id])
        return (list(recs) if recs and recs[0].state is JobState.COMPLETED
                and recs[0].end_time is not None and recs[0].eligible_time is not None
                and recs[0].name == "it-short" and recs[0].partition == "gpu" else None)

    rec = wait_for("sacct COMPLETED", finished, 90)[0]
    assert rec.job_id == job_id and rec.account == "teamb"
    assert rec.alloc_gpus == {"a100": 1}
    assert rec.nodes.startswith("a100-") and rec.exit_code == "0:0"
    assert rec.elapsed_s >= 1 and rec.start_time and rec.end_time
    # the same record through a time window, as reports and refit ask for it (UTC bounds)
    def listed(since: float, until: float) -> list[AccountingRecord]:
        return [r for r in slurm_backend.accounting(since=stamp(int(since)),
                                                    until=stamp(int(until)))
                if r.job_id == job_id]

    assert listed(rec.start_time - 60, time.time() + 60) == [rec]
    assert listed(rec.start_time - 7200, rec.start_time - 3600) == []  # a window before it


def test_scheduler_depths_live(slurm_backend: CommandBackend) -> None:
    # the local cluster's slurm.conf (templates/slurm.conf.j2) sets SchedulerParameters without
    # either depth: Slurm's defaults, read back through scontrol show config
    conf = (REPO / "templates" / "slurm.conf.j2").read_text()
    assert "SchedulerParameters=" in conf and "bf_max_job_test" not in conf
    depths = slurm_backend.scheduler_depths()
    assert (depths.backfill, depths.main) == (500, 100)
