"""`hase report` against the real local cluster: each component of a heterogeneous job and each
array task is a job holding its own GPUs (sacct -X, as the report asks it); sacct is asked for
this cluster (--local) or the one --cluster names (-M)."""

from __future__ import annotations

import json

import pytest

from slurm_hase.reports.fairness import fairness_report
from slurm_hase.reports.window import stamp
from slurm_hase.slurm.command_backend import CommandBackend
from slurm_hase.slurm.types import AccountingRecord, JobState
from tests.integration.test_adapter_live import QUIET, wait_for
from tests.integration.test_report_live import _hase

pytestmark = pytest.mark.slurm
CLUSTER = "hase"  # ClusterName of the local cluster's slurm.conf


def _done(backend: CommandBackend, job_id: str, count: int) -> list[AccountingRecord] | None:
    """The job's `count` sacct records once all COMPLETED with end and eligible times."""
    recs = backend.accounting(job_ids=[job_id])
    if len(recs) == count and all(r.state is JobState.COMPLETED and r.end_time
                                  and r.eligible_time for r in recs):
        return recs
    return None


def test_hetjob_components_and_array_tasks_each_count(
        slurm_backend: CommandBackend, slurm_env: dict[str, str], jobs: list[str]) -> None:
    """`sbatch -G1 ... : -G1 ...` (two components, 22.05 JobIDs N+0 and N+1) and `sbatch -a 1-2
    -G1`: four allocations of one GPU each, four jobs in the report, each one's GPU time."""
    het = slurm_backend.submit([*QUIET, "-A", "teamb", "-J", "it-het", "-G1", "--wrap",
                                "sleep 2", ":", "-G1", "--wrap", "sleep 2"], None)
    array = slurm_backend.submit([*QUIET, "-A", "teamb", "-J", "it-array", "-a", "1-2", "-G1",
                                  "--wrap", "sleep 2"], None)
    jobs.extend([het, array])
    het_recs = wait_for("both components in sacct", lambda: _done(slurm_backend, het, 2), 120)
    array_recs = wait_for("both tasks in sacct", lambda: _done(slurm_backend, array, 2), 120)
    assert sorted(r.job_id for r in het_recs) == [f"{het}+0", f"{het}+1"]
    assert sorted(r.job_id for r in array_recs) == [f"{array}_1", f"{array}_2"]
    mine = het_recs + array_recs
    lo = min(r.submit_time or 0 for r in mine) - 5
    hi = max(r.end_time or 0 for r in mine) + 5
    ids = {r.job_id for r in mine}
    # the window as the report asks sacct for it (this cluster, -X -D)
    live = [r for r in slurm_backend.accounting(since=stamp(lo), until=stamp(hi)) if r.job_id in ids]
    assert sorted(r.job_id for r in live) == sorted(ids)
    [teamb] = fairness_report(live, window=(lo, hi)).accounts
    assert teamb.jobs == 4
    assert teamb.total_gpu_hours == pytest.approx(sum(r.elapsed_s for r in mine) / 3600)
    # the CLI over the same window: at least these four jobs (other tests' jobs may be there)
    res = _hase(slurm_env, "report", "usage", "--since", stamp(lo), "--until", stamp(hi),
                "--account", "teamb", "--weights", "none", "--json")
    assert res.returncode == 0, res.stderr
    [row] = json.loads(res.stdout)["accounts"]
    assert row["jobs"] >= 4 and row["total_gpu_hours"] >= round(teamb.total_gpu_hours, 6) - 1e-6


def test_cluster_option_against_real_sacct(
        slurm_backend: CommandBackend, slurm_env: dict[str, str], jobs: list[str]) -> None:
    """--cluster hase (sacct -M hase, sacctmgr cluster=hase) reports the job sacct --local
    does; --cluster of a cluster Slurm has not got reports nothing, with a warning."""
    job_id = slurm_backend.submit([*QUIET, "-A", "teama", "-J", "it-cluster", "-G1", "--wrap",
                                   "sleep 1"], None)
    jobs.append(job_id)
    [rec] = wait_for("the job in sacct", lambda: _done(slurm_backend, job_id, 1), 120)
    lo, hi = (rec.submit_time or 0) - 5, (rec.end_time or 0) + 5
    window = {"since": stamp(lo), "until": stamp(hi)}
    named = [r for r in slurm_backend.accounting(**window, cluster=CLUSTER) if r.job_id == job_id]
    assert named == [rec]
    assert slurm_backend.account_shares(CLUSTER) == slurm_backend.account_shares()
    span = ["--since", stamp(lo), "--until", stamp(hi), "--account", "teama", "--json"]
    res = _hase(slurm_env, "report", "fairness", *span, "--cluster", CLUSTER)
    assert res.returncode == 0, res.stderr
    [teama] = json.loads(res.stdout)["accounts"]
    shares = slurm_backend.account_shares()
    assert teama["jobs"] >= 1
    assert teama["entitlement"] == pytest.approx(shares["teama"] / sum(shares.values()))
    none = _hase(slurm_env, "report", "usage", *span, "--cluster", "no-such-cluster-hase")
    assert none.returncode == 0, none.stderr
    assert json.loads(none.stdout)["accounts"] == []
    assert "hase: warning: --cluster no-such-cluster-hase: sacct has no jobs of it" in none.stderr
