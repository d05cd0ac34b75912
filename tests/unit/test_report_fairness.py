"""Fairness report core: hand-built records with known answers, and the real sacct captures."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hase.errors import ConfigError
from slurm_hase.reports.fairness import (
    fairness_report,
    guess_node_types,
    jain_index,
    job_gpus,
    run_seconds,
)
from slurm_hase.reports.weights import catalog_weights, check_weights, parse_weights
from slurm_hase.reports.window import to_epoch, window
from slurm_hase.slurm.types import AccountingRecord, JobState


def rec(job: str, account: str, user: str, gpus: dict[str, int], secs: int, *,
        submit: int = 0, start: int | None = 10, mps: int = 0, node: str = "n1") -> AccountingRecord:
    tres = {f"gres/gpu:{t}": str(n) for t, n in gpus.items() if t}
    if mps:
        tres["gres/mps"] = str(mps)
    return AccountingRecord(
        job_id=job, name=job, account=account, user=user,
        state=JobState.COMPLETED if start is not None else JobState.PENDING,
        submit_time=submit, start_time=start,
        end_time=None if start is None else start + secs, elapsed_s=secs,
        alloc_tres=tres, alloc_gpus=dict(gpus), nodes=node,
    )


def test_jain_index_known_values() -> None:
    assert jain_index([1.0, 1.0, 1.0]) == pytest.approx(1.0)
    assert jain_index([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)
    assert jain_index([3.0, 1.0]) == pytest.approx(16 / 20)
    assert jain_index([]) is None
    assert jain_index([0.0, 0.0]) == 1.0


def test_hours_by_type_normalised_and_shares() -> None:
    records = [
        rec("1", "a", "alice", {"a100": 2}, 3600),          # 2 a100-h
        rec("2", "a", "bob", {"t4": 4}, 1800),              # 2 t4-h
        rec("3", "b", "carol", {"t4": 1}, 7200, submit=0, start=100),  # 2 t4-h, waited 100 s
        rec("4", "b", "carol", {}, 0, start=None),          # pending
    ]
    rep = fairness_report(records, speed_weights={"a100": 1.0, "t4": 0.25}, shares={"a": 1, "b": 3})
    a, b = rep.accounts
    assert a.gpu_hours == {"a100": pytest.approx(2.0), "t4": pytest.approx(2.0)}
    assert a.norm_gpu_hours == pytest.approx(2.5)
    assert b.norm_gpu_hours == pytest.approx(0.5)
    assert a.share == pytest.approx(2.5 / 3) and b.share == pytest.approx(0.5 / 3)
    assert a.entitlement == pytest.approx(0.25) and b.entitlement == pytest.approx(0.75)
    assert a.ratio == pytest.approx((2.5 / 3) / 0.25)
    assert a.ratio is not None and b.ratio is not None
    ratios = [a.ratio, b.ratio]
    assert rep.jain_index == pytest.approx(sum(ratios) ** 2 / (2 * sum(r * r for r in ratios)))
    assert rep.jain_basis == "share/entitlement"
    assert (b.jobs, b.pending_now, b.never_started, b.mean_wait_s) == (2, 1, 0, 100.0)
    assert a.mean_wait_s == 10.0
    assert [(u.account, u.user) for u in rep.users] == [("a", "alice"), ("a", "bob"), ("b", "carol")]
    assert rep.users[1].gpu_hours == {"t4": pytest.approx(2.0)}
    assert rep.total_gpu_hours == pytest.approx(6.0)
    assert rep.speed_weights == {"a100": 1.0, "t4": 0.25}


def test_without_shares_jain_uses_normalised_hours() -> None:
    records = [rec("1", "a", "u", {"v100": 1}, 3600), rec("2", "b", "u", {"v100": 1}, 3600)]
    rep = fairness_report(records)
    assert rep.jain_index == pytest.approx(1.0)
    assert rep.jain_basis == "normalised GPU-hours"
    assert all(r.entitlement is None and r.ratio is None for r in rep.accounts)


def test_account_without_shares_entry_is_left_out_of_jain() -> None:
    records = [rec("1", "a", "u", {"v100": 1}, 3600), rec("2", "x", "u", {"v100": 9}, 3600)]
    rep = fairness_report(records, shares={"a": 1})
    x = next(r for r in rep.accounts if r.account == "x")
    assert x.entitlement == 0.0 and x.ratio is None
    assert rep.jain_index == pytest.approx(1.0)  # only "a" counts


def test_node_types_are_guessed_only_from_single_node_single_type_jobs() -> None:
    """A job over several nodes (a list or a range) says nothing about one node, and a node
    seen with two types is left unguessed (its MPS shares stay untyped)."""
    records = [rec("1", "a", "u", {"a100": 2}, 60, node="gpu-[1-2]"),
               rec("2", "a", "u", {"a100": 2}, 60, node="gpu-3,gpu-4"),
               rec("3", "a", "u", {"v100": 1}, 60, node="mix-1"),
               rec("4", "a", "u", {"t4": 1}, 60, node="mix-1"),
               rec("5", "a", "u", {"t4": 1}, 60, node="t4-1")]
    assert guess_node_types(records) == {"t4-1": "t4"}


def test_mps_share_counts_as_fraction_on_node_type() -> None:
    records = [rec("1", "a", "u", {"a100": 1}, 60, node="gpu-7"),
               rec("2", "a", "u", {}, 3600, mps=25, node="gpu-7"),
               rec("3", "a", "u", {}, 3600, mps=50, node="other")]
    assert guess_node_types(records) == {"gpu-7": "a100"}
    assert job_gpus(records[1], {"gpu-7": "a100"}) == {"a100": 0.25}
    assert job_gpus(records[2], {}) == {"mps": 0.5}
    assert job_gpus(records[2], {}, mps_per_gpu=200) == {"mps": 0.25}
    # whole GPUs and an MPS share in one job: the GPUs already cover the share
    both = rec("4", "a", "u", {"a100": 1}, 3600, mps=50, node="gpu-7")
    assert job_gpus(both, {"gpu-7": "a100"}) == {"a100": 1.0}
    rep = fairness_report(records)
    assert rep.accounts[0].gpu_hours == {"a100": pytest.approx(60 / 3600 + 0.25), "mps": 0.5}


def test_untyped_gpus_and_window_clipping() -> None:
    r = rec("1", "a", "u", {"": 2}, 1000, start=500)
    assert job_gpus(r) == {"untyped": 2.0}
    assert run_seconds(r) == 1000
    assert run_seconds(r, (1000, 10_000)) == 500
    assert run_seconds(r, (0, 600)) == 100
    assert run_seconds(r, (2000, 3000)) == 0
    running = AccountingRecord("2", "r", "a", "u", JobState.RUNNING, start_time=100, elapsed_s=50)
    assert run_seconds(running, (120, 1000)) == 30


@pytest.mark.usefixtures("utc")
def test_window_parsing() -> None:
    now = 1_000_000.0
    assert to_epoch("now", now) == 1_000_000
    assert to_epoch("now-2days", now) == 1_000_000 - 2 * 86400
    assert to_epoch("now-3hours", now) == 1_000_000 - 3 * 3600
    assert to_epoch("2026-11-29T22:41:13", now) == 1795992073  # local time, here UTC
    assert to_epoch("yesterday-ish", now) is None
    assert window("now-1day", "now", now) == (1_000_000 - 86400, 1_000_000)
    with pytest.raises(ConfigError, match="^empty window: --since 'teatime'"):
        window("teatime", "now", now)  # 16:00 today, after now (13:46): refused, not unclipped
    with pytest.raises(ConfigError, match="^bad --until 'yesterday-ish': unknown time form"):
        window("now-1day", "yesterday-ish", now)


def test_weights_parsing_and_catalog() -> None:
    assert parse_weights("a100=1, t4=0.2") == {"a100": 1.0, "t4": 0.2}
    for bad in ("a100", "a100=x", "=1", "t4=-1", "t4=nan", "t4=inf"):
        with pytest.raises(ConfigError, match="bad weight"):
            parse_weights(bad)
    with pytest.raises(ConfigError, match=r"^bad weight 't4=nan' in 'a100=1,t4=nan': expected "
                                          r"TYPE=NUMBER \(>= 0\), e.g. a100=1.0$"):
        parse_weights("a100=1,t4=nan")
    w = catalog_weights(["a100", "t4", "nonesuch"])
    assert "nonesuch" not in w  # left to the report, which weighs it 1 and says so
    assert 0 < w["t4"] < w["a100"] <= 1.0
    rep = fairness_report([rec("1", "a", "u", {"a100": 1}, 3600), rec("2", "a", "u", {"nonesuch": 1}, 3600)],
                          speed_weights=w)
    assert rep.speed_weights["nonesuch"] == 1.0 and rep.defaulted_weights == ["nonesuch"]


@pytest.mark.parametrize("version", ["22.05", "24.11"])
def test_real_sacct_captures(fixtures_dir: Path, version: str) -> None:
    from slurm_hase.slurm.parse_json_sacct import parse_sacct_json

    raw = (fixtures_dir / "slurm" / version / "sacct.json").read_text()
    rep = fairness_report(parse_sacct_json(raw), speed_weights={"a100": 1.0, "v100": 0.5, "t4": 0.25},
                          shares={"teama": 1, "teamb": 1})
    by = {r.account: r for r in rep.accounts}
    assert set(by) == {"teama", "teamb"}
    # done-a100 (1 GPU, 1 s) + done-mps (50 shares on a100-1, 1 s), fail-v100 ran 0 s
    teama_a100 = (1 + 0.5) / 3600
    teamb_t4 = 2 * 2 / 3600  # done-t4: 2 GPUs, 2 s
    if version == "24.11":  # plus the running run-a100 / run-mps (2 s so far) and run-v100 (2x2 s)
        teama_a100 += (1 + 0.5) * 2 / 3600
        assert by["teamb"].gpu_hours["v100"] == pytest.approx(4 / 3600)
        assert (by["teamb"].jobs, by["teamb"].pending_now, by["teamb"].never_started) == (5, 3, 0)
    assert by["teama"].gpu_hours["a100"] == pytest.approx(teama_a100)
    assert by["teamb"].gpu_hours["t4"] == pytest.approx(teamb_t4)
    assert by["teama"].mean_wait_s is not None and by["teama"].mean_wait_s >= 1.0
    assert rep.jain_index is not None and 0.5 <= rep.jain_index < 1.0


def test_shares_that_entitle_no_account_fall_back_to_normalised_hours() -> None:
    records = [rec("1", "a", "u", {"v100": 1}, 3600), rec("2", "b", "u", {"v100": 3}, 3600)]
    by_hours = fairness_report(records)
    assert by_hours.jain_index == pytest.approx(16 / 20) and by_hours.warnings == []
    for shares in ({"z": 1.0}, {"a": 0.0, "b": 0.0}, {"a": 0.0, "z": 2.0}, {}):
        rep = fairness_report(records, shares=shares)
        assert rep.jain_basis == "normalised GPU-hours", shares
        assert rep.jain_index == pytest.approx(16 / 20)
        assert [r.entitlement for r in rep.accounts] == [0.0, 0.0]
        assert len(rep.warnings) == 1 and "accounts with jobs: a, b" in rep.warnings[0]
    assert fairness_report(records, shares={"z": 1}).warnings[0].startswith("the shares match no account")
    assert fairness_report(records, shares={"a": 0, "z": 1}).warnings[0].startswith(
        "no account in the report has a positive share")
    rep = fairness_report(records, shares={"a": 1, "z": 1})  # one entitled account is enough
    assert rep.jain_basis == "share/entitlement" and rep.jain_index == 1.0
    # ... for the basis, but an index over one value is 1 whatever it is: said
    assert rep.warnings == ["Jain's index is taken over one account only: b has jobs but no "
                            "share, so the 1.000 says nothing of fairness"]
    assert fairness_report(records, shares={"a": 1, "b": 1}).warnings == []
    with pytest.raises(ConfigError, match="negative share for account 'b': -1"):
        fairness_report(records, shares={"a": 1, "b": -1})


def test_check_weights_against_data_and_catalog() -> None:
    data = ["a100", "site-gpu", "untyped"]
    assert check_weights({"site-gpu": 0.3, "a100": 1, "mps": 0.2}, data) == {
        "site-gpu": 0.3, "a100": 1.0, "mps": 0.2}  # in the data, or the report's own labels
    assert check_weights({"A100-SXM4-40GB": 0.9, "h100": 3}, data) == {"a100": 0.9}  # same catalog GPU
    assert check_weights({"A100": 0.9, "a100": 1}, data) == {"a100": 1.0}  # its own weight wins
    with pytest.raises(ConfigError, match=r"unknown GPU type 'x200'; did you mean h200.*\(GPU types in the "
                                          r"report: a100, site-gpu, untyped\)"):
        check_weights({"a100": 1, "x200": 0.5}, data)


def test_only_users_keeps_their_rows_and_their_accounts_whole() -> None:
    from slurm_hase.reports.views import only_users

    rep = fairness_report([rec("1", "phys", "ann", {"a100": 1}, 3600),
                           rec("2", "phys", "bob", {"a100": 2}, 3600),
                           rec("3", "chem", "cat", {"a100": 1}, 3600),
                           rec("4", "chem", "ann", {"a100": 1}, 7200)])
    mine = only_users(rep, ["ann"])
    assert sorted((u.account, u.user) for u in mine.users) == [("chem", "ann"), ("phys", "ann")]
    hours = {a.account: a.total_gpu_hours for a in mine.accounts}
    assert hours == {"phys": 3.0, "chem": 3.0}  # every user's jobs in those accounts
    assert mine.total_gpu_hours == rep.total_gpu_hours
    only_bob = only_users(rep, ["bob"])
    assert [a.account for a in only_bob.accounts] == ["phys"]
    assert only_users(rep, ["nobody"]).accounts == []


def test_time_suspended_counts_with_a_window_and_without() -> None:
    """A job suspended 9 of its 10 hours (Elapsed 1 h) held its GPUs all 10: the same with
    a window as without, where the report used to count 1 h without and 10 h with one.
    Still running, it held them from its start to when sacct was asked (queried_at): 10 h
    too, not its Elapsed 1 h (which leaves suspended time out); this test asserted the 1 h
    before. Only where the query time is unknown (a saved file) does Elapsed stand in."""
    import dataclasses

    held = dataclasses.replace(rec("1", "a", "u", {"v100": 1}, 36000), elapsed_s=3600)
    assert run_seconds(held) == run_seconds(held, window=(0, 10**6)) == 36000
    assert run_seconds(held, window=(10, 10 + 1800)) == 1800
    running = dataclasses.replace(held, end_time=None, state=JobState.RUNNING)
    assert run_seconds(running, queried_at=10 + 36000) == 36000  # start to the query
    assert run_seconds(running, window=(0, 10**6), queried_at=10 + 36000) == 36000
    assert run_seconds(running) == 3600  # no query time known: Elapsed, suspended time missed


def test_an_mps_share_counts_against_one_gpu_of_its_node() -> None:
    """A node with gpu:a100:4 and mps:800 has 200 MPS per GPU: gres/mps=200 there is one
    whole GPU's worth, not two (the divisor was fixed at 100); nodes without mps keep 100."""
    from slurm_hase.slurm.tres import node_mps_per_gpu
    from slurm_hase.slurm.types import Node

    nodes = [Node("big-1", "MIXED", gpus={"a100": 4}, mps_total=800),
             Node("t4-1", "IDLE", gpus={"t4": 4}, mps_total=400), Node("cpu-1", "IDLE")]
    assert node_mps_per_gpu(nodes) == {"big-1": 200, "t4-1": 100}
    job = rec("1", "a", "u", {}, 3600, mps=200, node="big-1")
    assert job_gpus(job, {"big-1": "a100"}, node_mps=node_mps_per_gpu(nodes)) == {"a100": 1.0}
    assert job_gpus(job, {"big-1": "a100"}) == {"a100": 2.0}  # without the nodes: 100 per GPU
    rep = fairness_report([job], node_types={"big-1": "a100"}, node_mps=node_mps_per_gpu(nodes))
    assert rep.accounts[0].gpu_hours == {"a100": pytest.approx(1.0)}


def test_jain_warns_of_accounts_it_leaves_out_that_used_gpus() -> None:
    # hog has share 0 and takes 90% of the GPU time; b and c split the rest evenly: their ratios
    # are equal, so the index (over ratios) is 1.000 and alone reads as perfectly fair
    records = [rec("1", "hog", "h", {"a100": 1}, 9 * 3600), rec("2", "b", "x", {"a100": 1}, 1800),
               rec("3", "c", "y", {"a100": 1}, 1800)]
    rep = fairness_report(records, speed_weights={"a100": 1}, shares={"hog": 0, "b": 1, "c": 1})
    assert rep.jain_index == pytest.approx(1.0)
    assert rep.warnings == ["Jain's index leaves out hog, which has jobs but no share and used "
                            "90.0% of the normalised GPU-hours: the index does not show that use"]
    # an account left out that used no GPU time changes nothing: no warning
    idle = [*records[1:], rec("4", "z", "w", {}, 0, start=None)]
    assert fairness_report(idle, shares={"b": 1, "c": 1}).warnings == []


def test_an_mps_share_over_several_nodes_counts_under_their_type() -> None:
    # AllocTRES counts a job's MPS over all its nodes (gres/mps=400 on two nodes of one GPU's
    # 200 each = 2 GPUs); the NodeList is a hostlist, which matched no node and fell back to
    # the `mps` type and 100 MPS per GPU (4 GPUs)
    job = rec("1", "a", "u", {}, 3600, mps=400, node="big-[1-2]")
    types, per_gpu = {"big-1": "a100", "big-2": "a100"}, {"big-1": 200, "big-2": 200}
    assert job_gpus(job, types, node_mps=per_gpu) == {"a100": pytest.approx(2.0)}
    # nodes of two types (or one the map lacks): no one type to name, as before
    assert job_gpus(job, {"big-1": "a100", "big-2": "v100"}) == {"mps": pytest.approx(4.0)}
    assert job_gpus(rec("2", "a", "u", {}, 60, mps=50, node="big-[1-3]"), types) == {"mps": 0.5}


def _cpu_job(job: str, account: str, secs: int) -> AccountingRecord:
    """A finished job that asked for CPUs only: its ReqTRES and AllocTRES name no GPU."""
    return AccountingRecord(
        job_id=job, name=job, account=account, user="dave", state=JobState.COMPLETED,
        submit_time=0, start_time=10, end_time=10 + secs, elapsed_s=secs,
        req_tres={"billing": "4", "cpu": "4", "mem": "8000M", "node": "1"},
        alloc_tres={"billing": "4", "cpu": "4", "node": "1"}, nodes="n1")


def test_cpu_only_jobs_are_left_out_of_the_gpu_report() -> None:
    """An account that ran only CPU jobs used to enter Jain's index at 0 GPU-hours, as if
    starved of GPUs: a and b sharing the GPUs evenly gave 0.667 instead of 1.000."""
    records = [rec("1", "a", "alice", {"a100": 1}, 3600), rec("2", "b", "bob", {"a100": 1}, 3600),
               _cpu_job("3", "cpu", 36000), _cpu_job("4", "a", 60)]
    rep = fairness_report(records, speed_weights={"a100": 1.0},
                          shares={"a": 1, "b": 1, "cpu": 1})
    assert [r.account for r in rep.accounts] == ["a", "b"]
    assert rep.jain_index == pytest.approx(1.0)
    assert [r.jobs for r in rep.accounts] == [1, 1]
    assert rep.cpu_only_jobs == 2 and rep.as_dict()["cpu_only_jobs"] == 2


def test_a_record_that_cannot_tell_is_kept() -> None:
    """A record without ReqTRES or AllocTRES (a pending squeue job sacct does not have) may
    ask for GPUs squeue does not show (--gpus-per-task): it is counted as before."""
    unknown = AccountingRecord(job_id="9", name="x", account="a", user="alice",
                               state=JobState.PENDING, submit_time=0)
    rep = fairness_report([unknown])
    assert [(r.account, r.pending_now) for r in rep.accounts] == [("a", 1)]
    assert rep.cpu_only_jobs == 0
