"""GPU shards (gres/shard, Slurm >= 22.05) in the reports: a job on N shards counts N / (its
node's shards per GPU) of a GPU of its node's type, as an MPS share does. Every number here
comes from the local-22.05/shard-* captures (capture-shard.sh): on a100-1 (gpu:a100:4,
shard:32: 8 shards a GPU) done-shard ran 4 s and run-shard 3 s so far on 4 shards (teama), beside
done-a100 (4 s) and run-a100 (3 s) on a whole A100 and done-mps (mps:50 on v100-1, 4 s) of teamb.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from slurm_hase.cli import report_cmd
from slurm_hase.cli.main import cli
from slurm_hase.reports.fairness import (
    SHARD_UNKNOWN,
    cpu_only,
    fairness_report,
    jain_index,
    job_gpus,
    node_gpu_types,
)
from slurm_hase.reports.queue import pending_record, with_queue
from slurm_hase.slurm.command_backend import live_jobs
from slurm_hase.slurm.commands import SACCT_DELIMITER
from slurm_hase.slurm.parse_json import parse_squeue_json
from slurm_hase.slurm.parse_json_nodes import parse_sinfo_json
from slurm_hase.slurm.parse_json_sacct import parse_sacct_json
from slurm_hase.slurm.parse_sacct_text import parse_sacct_parsable
from slurm_hase.slurm.parse_text import parse_scontrol_nodes
from slurm_hase.slurm.tres import node_mps_per_gpu, node_shards_per_gpu
from slurm_hase.slurm.types import AccountingRecord, Job, JobState, Node

H = 3600.0


def _dir(fixtures_dir: Path) -> Path:
    return fixtures_dir / "slurm" / "local-22.05"


def _records(fixtures_dir: Path) -> list[AccountingRecord]:
    text = (_dir(fixtures_dir) / "shard-sacct.txt").read_text()
    return parse_sacct_parsable(text, delimiter=SACCT_DELIMITER)


def _nodes(fixtures_dir: Path) -> list[Node]:
    return parse_scontrol_nodes((_dir(fixtures_dir) / "shard-scontrol-show-node.txt").read_text())


def _queue(fixtures_dir: Path) -> list[Job]:
    return live_jobs(parse_squeue_json((_dir(fixtures_dir) / "shard-squeue.json").read_text()))


def _report_inputs(nodes: list[Node]) -> dict[str, Any]:
    return {"node_types": node_gpu_types(nodes), "node_mps": node_mps_per_gpu(nodes),
            "node_shards": node_shards_per_gpu(nodes)}


def test_a_nodes_shards_per_gpu_from_scontrol_and_sinfo(fixtures_dir: Path) -> None:
    nodes = _nodes(fixtures_dir)
    assert [(n.name, n.gpus, n.shard_total, n.mps_total) for n in nodes] == [
        ("a100-1", {"a100": 4}, 32, 0), ("v100-1", {"v100": 4}, 0, 400)]
    assert node_shards_per_gpu(nodes) == {"a100-1": 8.0}  # Gres=gpu:a100:4,shard:a100:32
    sinfo = parse_sinfo_json((_dir(fixtures_dir) / "shard-sinfo.json").read_text())
    assert node_shards_per_gpu(sinfo) == {"a100-1": 8.0}
    same = parse_scontrol_nodes(
        (_dir(fixtures_dir) / "shard-mps-same-node-scontrol-show-node.txt").read_text())
    assert [(n.name, n.mps_total, n.shard_total) for n in same] == [("a100-1", 400, 32),
                                                                     ("v100-1", 400, 0)]


@pytest.mark.parametrize("source", ["text", "json"])
def test_a_shard_job_counts_its_part_of_a_gpu(fixtures_dir: Path, source: str) -> None:
    records = (_records(fixtures_dir) if source == "text" else
               parse_sacct_json((_dir(fixtures_dir) / "shard-sacct.json").read_text()))
    shard = next(r for r in records if r.name == "done-shard")
    assert shard.alloc_tres["gres/shard"] == "4" and not shard.alloc_gpus
    assert not cpu_only(shard)  # it was left out as CPU-only before
    rep = fairness_report(records, **_report_inputs(_nodes(fixtures_dir)))
    by = {a.account: a for a in rep.accounts}
    # 4 of a100-1's 8 shards a GPU: half an A100, for 4 s + 3 s (running, start + Elapsed)
    assert by["teama"].gpu_hours == pytest.approx({"a100": 0.5 * (4 + 3) / H})
    assert by["teama"].jobs == 2
    # whole GPUs and MPS as before: done-a100 4 s + run-a100 3 s; mps:50 of v100-1's 100 a GPU
    assert by["teamb"].gpu_hours == pytest.approx({"a100": 7 / H, "v100": 0.5 * 4 / H})
    assert rep.cpu_only_jobs == 0 and rep.shards_as_whole_gpus == []
    assert not any("shard" in w for w in rep.warnings)


def test_shards_weigh_like_mps_in_shares_and_jain(fixtures_dir: Path) -> None:
    records = _records(fixtures_dir)
    rep = fairness_report(records, speed_weights={"a100": 1.0, "v100": 0.25},
                          shares={"teama": 60, "teamb": 40}, **_report_inputs(_nodes(fixtures_dir)))
    by = {a.account: a for a in rep.accounts}
    teama, teamb = 3.5 / H, (7 + 0.25 * 2) / H
    assert (by["teama"].norm_gpu_hours, by["teamb"].norm_gpu_hours) == pytest.approx((teama, teamb))
    assert by["teama"].share == pytest.approx(teama / (teama + teamb))
    ratios = [by["teama"].share / 0.6, by["teamb"].share / 0.4]
    assert [by["teama"].ratio, by["teamb"].ratio] == pytest.approx(ratios)
    assert rep.jain_index == pytest.approx(jain_index(ratios))


def test_mps_and_whole_gpus_count_as_before(fixtures_dir: Path) -> None:
    """Knowing the nodes' shards changes nothing for jobs without shards (the 22.05 capture)."""
    records = parse_sacct_json((fixtures_dir / "slurm" / "22.05" / "sacct.json").read_text())
    before = fairness_report(records).as_dict()
    after = fairness_report(records, node_shards={"a100-1": 8.0, "v100-1": 8.0}).as_dict()
    assert after == before and "shard" not in after["gpu_types"]


def test_unknown_shards_per_gpu_count_a_whole_gpu_with_a_warning(fixtures_dir: Path) -> None:
    records = _records(fixtures_dir)
    rep = fairness_report(records)  # a saved file: no nodes; a100-1's type guessed from done-a100
    by = {a.account: a for a in rep.accounts}
    assert by["teama"].gpu_hours == pytest.approx({"a100": 7 / H})
    assert rep.shards_as_whole_gpus == ["1", "4"]
    assert any(w.startswith("the shard count per GPU of the nodes of 2 job(s) on GPU shards is "
                            "unknown") and w.endswith("more than it held (1, 4)")
               for w in rep.warnings)
    # no typed job on its node either: the shards count under "shard"
    alone = [r for r in records if r.name == "done-shard"]
    assert fairness_report(alone).gpu_types == [SHARD_UNKNOWN]
    assert job_gpus(alone[0], node_shards={"a100-1": 8.0}) == {SHARD_UNKNOWN: 0.5}


def test_shards_and_mps_of_one_job_both_count(fixtures_dir: Path) -> None:
    """22.05 ran `--gres=mps:10,shard:2` (shard:32 and mps:400 on one node of 4 GPUs)."""
    text = (_dir(fixtures_dir) / "shard-mps-same-node-sacct.txt").read_text()
    both = next(r for r in parse_sacct_parsable(text, delimiter=SACCT_DELIMITER)
                if r.name == "same-both")
    assert (both.alloc_tres["gres/mps"], both.alloc_tres["gres/shard"]) == ("10", "2")
    got = job_gpus(both, {"a100-1": "a100"}, node_mps={"a100-1": 100},
                   node_shards={"a100-1": 8.0})
    assert got == pytest.approx({"a100": 10 / 100 + 2 / 8})


def test_a_pending_shard_job_asks_for_its_shards(fixtures_dir: Path) -> None:
    queue = _queue(fixtures_dir)
    pend = next(j for j in queue if j.name == "pend-shard")
    assert pend.gpu is None and pend.tres_per_node == "gres:shard:2"  # the daemon plans it not
    rec = pending_record(pend)
    assert rec.req_tres == {"gres/shard": "2"} and not cpu_only(rec)
    merged = with_queue(_records(fixtures_dir), queue)
    [pending] = [r for r in merged if r.state is JobState.PENDING]
    assert pending.name == "pend-shard"


class ShardBackend:
    """Live-mode seam over the shard captures: sacct -P, scontrol show node, squeue --json."""

    def __init__(self, fixtures_dir: Path) -> None:
        self.fixtures_dir = fixtures_dir

    def accounting(self, *, since: str, until: str) -> list[AccountingRecord]:
        return _records(self.fixtures_dir)

    def account_shares(self) -> dict[str, float]:
        return {"teama": 60.0, "teamb": 40.0}

    def nodes(self) -> list[Node]:
        return _nodes(self.fixtures_dir)

    def jobs(self) -> list[Job]:
        return _queue(self.fixtures_dir)


@pytest.mark.usefixtures("utc")
def test_usage_counts_shards_from_the_nodes_slurm_shows(monkeypatch: pytest.MonkeyPatch,
                                                         fixtures_dir: Path) -> None:
    monkeypatch.setattr(report_cmd, "_backend", lambda timeout_s: ShardBackend(fixtures_dir))
    # the captures were taken at 09:13:07; run-* started 09:13:04
    window = ["--since", "2026-12-05T09:00:00", "--until", "2026-12-05T09:13:07"]
    res = CliRunner().invoke(cli, ["report", "usage", *window, "--json", "--weights", "none"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    rows = {a["account"]: a for a in out["accounts"]}
    assert rows["teama"]["gpu_hours"] == {"a100": round(0.5 * 7 / H, 6)}
    assert (rows["teama"]["jobs"], rows["teama"]["pending_now"]) == (3, 1)
    assert rows["teamb"]["gpu_hours"] == {"a100": round(7 / H, 6), "v100": round(2 / H, 6)}
    assert out["cpu_only_jobs"] == 0 and out["shards_as_whole_gpus"] == []


@pytest.mark.usefixtures("utc")
def test_a_saved_file_counts_shards_as_whole_gpus_and_says_so(fixtures_dir: Path) -> None:
    saved = str(_dir(fixtures_dir) / "shard-sacct.json")
    res = CliRunner().invoke(cli, ["report", "usage", "--input", saved, "--weights", "none"])
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[-1] == (
        "warning: the shard count per GPU of the nodes of 2 job(s) on GPU shards is unknown (a "
        "saved file, nodes Slurm does not show now, or nodes that differ): each counts as a "
        "whole GPU a node, more than it held (1, 4)")
    res = CliRunner().invoke(cli, ["report", "fairness", "--input", saved, "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["shards_as_whole_gpus"] == ["1", "4"]
    assert "hase: warning: the shard count per GPU" in res.stderr
