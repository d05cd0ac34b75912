"""The same job mix, captured on Slurm 22.05 and 24.11, as JSON and as text, parses the same."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from slurm_hase.slurm.command_backend import live_jobs
from slurm_hase.slurm.parse_json import parse_squeue_json
from slurm_hase.slurm.parse_json_nodes import parse_sinfo_json
from slurm_hase.slurm.parse_json_sacct import parse_sacct_json
from slurm_hase.slurm.parse_sacct_text import parse_sacct_parsable
from slurm_hase.slurm.parse_text import parse_scontrol_jobs, parse_scontrol_nodes
from slurm_hase.slurm.types import AccountingRecord, GpuRequest, Job, JobState, Node
from tests.conftest import slurm_capture

VERSIONS = ("22.05", "24.11")


pytestmark = pytest.mark.usefixtures("utc")


def cap(fixtures_dir: Path, version: str, name: str) -> str:
    return slurm_capture(fixtures_dir, version, name)


def by_name(jobs: list[Job]) -> dict[str, Job]:
    return {j.name: j for j in jobs}


def all_job_views(fixtures_dir: Path) -> dict[str, dict[str, Job]]:
    views = {}
    for v in VERSIONS:
        views[f"{v}/json"] = by_name(live_jobs(parse_squeue_json(cap(fixtures_dir, v, "squeue.json"))))
        views[f"{v}/text"] = by_name(
            live_jobs(parse_scontrol_jobs(cap(fixtures_dir, v, "scontrol-show-job.txt"))))
    return views


def test_json_and_text_agree_within_each_version(fixtures_dir: Path) -> None:
    for v in VERSIONS:
        from_json = live_jobs(parse_squeue_json(cap(fixtures_dir, v, "squeue.json")))
        from_text = live_jobs(parse_scontrol_jobs(cap(fixtures_dir, v, "scontrol-show-job.txt")))
        assert len(from_json) >= 7
        assert sorted(from_json, key=lambda j: int(j.job_id)) == sorted(
            from_text, key=lambda j: int(j.job_id)), v


def test_22_05_squeue_json_lists_finished_jobs_live_jobs_drops_them(fixtures_dir: Path) -> None:
    jobs = parse_squeue_json(cap(fixtures_dir, "22.05", "squeue.json"))
    assert {"done-a100", "fail-v100"} <= {j.name for j in jobs}
    assert {"done-a100", "fail-v100"}.isdisjoint({j.name for j in live_jobs(jobs)})


def _portable(job: Job) -> Job:
    """Drop what legitimately differs between the two clusters (ids, clocks, priorities)."""
    return replace(job, job_id="", submit_time=None, eligible_time=None, start_time=None,
                   end_time=None,
                   priority=0, tres_per_job="", tres_per_node="",
                   array_job_id=None if job.array_job_id is None else "")


@pytest.mark.parametrize("name", ["run-a100", "run-v100", "run-mps", "held", "arr", "untyped"])
def test_same_job_same_result_on_every_version_and_format(fixtures_dir: Path, name: str) -> None:
    views = all_job_views(fixtures_dir)
    first = _portable(views["22.05/json"][name])
    for label, jobs in views.items():
        assert _portable(jobs[name]) == first, label


def test_specific_fields_of_the_job_mix(fixtures_dir: Path) -> None:
    for label, jobs in all_job_views(fixtures_dir).items():
        v100 = jobs["run-v100"]
        assert v100.comment == '{"v":1,"model":"resnet50","bs":64}', label
        assert v100.features == "volta" and v100.account == "teamb"
        assert v100.gpu == GpuRequest(2, "v100", "node")
        assert v100.alloc_gpus == {"v100": 2} and v100.nodes == "v100-1"
        assert v100.state is JobState.RUNNING and v100.time_limit_s is None
        held = jobs["held"]
        assert held.held and held.pending and held.reason == "JobHeldUser"
        assert held.gpu == GpuRequest(1, "t4", "job")
        assert not jobs["untyped"].held and jobs["untyped"].nice == 10
        assert jobs["untyped"].gpu == GpuRequest(1, None, "node")
        assert jobs["run-mps"].gpu == GpuRequest(0, None, "node", 50)
        arr = jobs["arr"]
        assert arr.features == "a100|v100" and arr.array_task_id == "1-3"
        assert arr.array_job_id == arr.job_id and arr.gpu == GpuRequest(1, None, "job")
        assert jobs["run-a100"].gpu == GpuRequest(1, "a100", "job")
        assert jobs["run-a100"].alloc_gpus == {"a100": 1}
        # eligible from submission (no --begin; the array a second or two later) but for the held job
        # (no eligible time yet)
        assert all(0 <= j.eligible_time - j.submit_time <= 2  # type: ignore[operator]
                   for j in jobs.values() if not j.held), label
        assert held.eligible_time is None
        # the capture cluster runs with JobRequeue=1: every batch job may be requeued
        assert all(j.requeue and j.restarts == 0 for j in jobs.values()), label


def test_tres_prefix_is_kept_as_slurm_wrote_it(fixtures_dir: Path) -> None:
    views = all_job_views(fixtures_dir)
    assert views["22.05/json"]["run-v100"].tres_per_node == "gres:gpu:v100:2"
    assert views["24.11/text"]["run-v100"].tres_per_node == "gres/gpu:v100:2"


def nodes(fixtures_dir: Path, v: str, kind: str) -> list[Node]:
    if kind == "json":
        return parse_sinfo_json(cap(fixtures_dir, v, "sinfo.json"))
    return parse_scontrol_nodes(cap(fixtures_dir, v, "scontrol-show-node.txt"))


def test_nodes_sinfo_json_equals_scontrol_text(fixtures_dir: Path) -> None:
    """Equal but for the GPU run-mps's share holds on a100-1: sinfo's gres_used names it, and
    these `scontrol show node -o` captures have no -d, so no GresUsed (AllocTRES counts whole
    GPUs only; scontrol-show-node-gres-used.txt in local-*/ is the -d form the backend reads)."""
    for v in VERSIONS:
        js = {n.name: n for n in nodes(fixtures_dir, v, "json")}
        tx = {n.name: n for n in nodes(fixtures_dir, v, "text")}
        assert (js["a100-1"].gpus_alloc, tx["a100-1"].gpus_alloc) == ({"a100": 2}, {"a100": 1})
        assert {k: replace(n, gpus_alloc={}) for k, n in js.items()} == {
            k: replace(n, gpus_alloc={}) for k, n in tx.items()}, v
        assert all(js[k] == tx[k] for k in js if k != "a100-1"), v


@pytest.mark.parametrize("kind", ["json", "text"])
def test_nodes_agree_across_versions(fixtures_dir: Path, kind: str) -> None:
    old = {n.name: n for n in nodes(fixtures_dir, "22.05", kind)}
    new = {n.name: n for n in nodes(fixtures_dir, "24.11", kind)}
    assert set(new) == {"a100-1", "v100-1", "t4-1"} and set(new) < set(old)
    for name in new:
        assert old[name] == new[name], name
    a100 = new["a100-1"]  # run-a100 (1 GPU) and run-mps (mps:50) run here
    held = {"json": 2, "text": 1}[kind]  # the share's GPU: named in gres_used, not AllocTRES
    assert (a100.gpus, a100.gpus_alloc, a100.mps_total, a100.mps_alloc) == (
        {"a100": 4}, {"a100": held}, 400, 50)
    assert new["v100-1"].gpus_alloc == {"v100": 2} and new["t4-1"].gpus_alloc == {}
    assert new["t4-1"].state == "IDLE" and new["t4-1"].usable
    assert new["v100-1"].features == ("v100", "volta") and a100.partitions == ("gpu",)


def sacct(fixtures_dir: Path, v: str, kind: str) -> dict[str, AccountingRecord]:
    if kind == "json":
        recs = parse_sacct_json(cap(fixtures_dir, v, "sacct.json"))
    else:
        recs = parse_sacct_parsable(cap(fixtures_dir, v, "sacct-parsable.txt"))
    return {r.name: r for r in recs}


def _acct_view(r: AccountingRecord) -> tuple[object, ...]:
    return (r.name, r.account, r.user, r.state, r.partition, r.elapsed_s, r.alloc_gpus,
            r.constraints, r.nodes, r.submit_time, r.start_time, r.end_time, r.alloc_tres)


def test_sacct_json_and_text_agree(fixtures_dir: Path) -> None:
    for v in VERSIONS:
        js, tx = sacct(fixtures_dir, v, "json"), sacct(fixtures_dir, v, "text")
        common = set(js) & set(tx)
        assert {"done-a100", "done-t4", "done-mps", "fail-v100"} <= common
        for name in common:
            assert _acct_view(js[name]) == _acct_view(tx[name]), (v, name)


@pytest.mark.parametrize("kind", ["json", "text"])
def test_sacct_alloc_gpus_by_type_on_both_versions(fixtures_dir: Path, kind: str) -> None:
    for v in VERSIONS:
        recs = sacct(fixtures_dir, v, kind)
        assert recs["done-a100"].alloc_gpus == {"a100": 1}
        assert recs["done-t4"].alloc_gpus == {"t4": 2}
        assert recs["done-mps"].alloc_gpus == {} and recs["done-mps"].alloc_tres["gres/mps"] == "50"
        assert recs["fail-v100"].state is JobState.FAILED and recs["fail-v100"].alloc_gpus == {
            "v100": 1}


def test_sacct_text_exit_codes_and_pipe_in_constraints(fixtures_dir: Path) -> None:
    for v in VERSIONS:
        assert sacct(fixtures_dir, v, "text")["fail-v100"].exit_code == "3:0"
    new = sacct(fixtures_dir, "24.11", "text")
    assert new["arr"].job_id == "11_[1-3]" and new["arr"].constraints == "a100|v100"
    assert new["arr"].nodes == "" and new["arr"].start_time is None
    assert new["run-v100"].constraints == "volta" and new["run-v100"].end_time is None
    assert sacct(fixtures_dir, "24.11", "json")["fail-v100"].exit_code == "3:0"
