"""TRES/GRES string parsing and building (strings as they appear in the real captures)."""

from __future__ import annotations

import pytest

from slurm_hase.errors import SlurmParseError
from slurm_hase.slurm.tres import (
    GresItem,
    format_gpu_tres,
    format_mps_tres,
    format_request,
    gpu_request,
    gpus_from_tres,
    gres_prefix,
    gres_shard_count,
    mps_from_tres,
    node_gres_counts,
    parse_gres,
    parse_gres_item,
    parse_tres_list,
    requested_shards,
    shards_from_tres,
)
from slurm_hase.slurm.types import GpuRequest


@pytest.mark.parametrize(
    ("text", "item"),
    [
        ("gres:gpu:a100:4", GresItem("gpu", "a100", 4)),
        ("gres/gpu:a100:4", GresItem("gpu", "a100", 4)),
        ("gres:gpu:1", GresItem("gpu", None, 1)),
        ("gres/gpu:1", GresItem("gpu", None, 1)),
        ("gpu:1", GresItem("gpu", None, 1)),
        ("gpu:t4", GresItem("gpu", "t4", 1)),
        ("gpu", GresItem("gpu", None, 1)),
        ("mps:50", GresItem("mps", None, 50)),
        ("gres:mps:50", GresItem("mps", None, 50)),
        ("mps:a100:400", GresItem("mps", "a100", 400)),
        ("gpu:a100:4(S:0)", GresItem("gpu", "a100", 4)),
        ("gpu:v100:2(IDX:0-1)", GresItem("gpu", "v100", 2)),
        ("gpu:a100:0(IDX:N/A)", GresItem("gpu", "a100", 0)),
        ("mps:a100:50(0/100,50/100,0/100,0/100)", GresItem("mps", "a100", 50)),
        ("mps:1k", GresItem("mps", None, 1024)),
    ],
)
def test_parse_gres_item(text: str, item: GresItem) -> None:
    assert parse_gres_item(text) == item


def test_parse_gres_list_keeps_commas_inside_parentheses() -> None:
    used = "gpu:a100:1(IDX:0),mps:a100:50(0/100,50/100,0/100,0/100)"  # 24.11 sinfo gres.used
    assert parse_gres(used) == [GresItem("gpu", "a100", 1), GresItem("mps", "a100", 50)]
    assert parse_gres("(null)") == [] and parse_gres("N/A") == [] and parse_gres(None) == []


@pytest.mark.parametrize("bad", ["gpu:a100:x", "gres/gpu::4", "gpu:a:b:c:d", ":4"])
def test_parse_gres_rejects_garbage(bad: str) -> None:
    with pytest.raises(SlurmParseError):
        parse_gres_item(bad)


def test_node_gres_counts() -> None:
    assert node_gres_counts("gpu:a100:4,mps:a100:400") == ({"a100": 4}, 400)
    assert node_gres_counts("gpu:a100:2(S:0),gpu:t4:2(S:1)") == ({"a100": 2, "t4": 2}, 0)
    assert node_gres_counts("gpu:4") == ({"": 4}, 0)
    # one type on both sockets: the entries add up
    assert node_gres_counts("gpu:a100:2(S:0),gpu:a100:2(S:1)") == ({"a100": 4}, 0)


def test_tres_list_and_gpu_counts() -> None:
    tres = "cpu=1,node=1,billing=1,gres/gpu=2,gres/gpu:v100=2"
    assert parse_tres_list(tres)["gres/gpu:v100"] == "2"
    assert gpus_from_tres(tres) == {"v100": 2}
    assert gpus_from_tres("cpu=1,gres/gpu=1") == {"": 1}
    assert gpus_from_tres("billing=1,cpu=1,gres/mps=50,node=1") == {}
    assert mps_from_tres("cpu=2,gres/gpu=1,gres/gpu:a100=1,gres/mps=50") == 50
    assert gpus_from_tres(None) == {} and parse_tres_list("") == {}
    assert gpus_from_tres("cpu=1,gres:gpu=2,gres:gpu:t4=2") == {"t4": 2}  # the old prefix
    assert gpus_from_tres("cpu=1,gres/gpu=1,gres/gpu:a100=0,gres/gpu:t4=1") == {"t4": 1}
    with pytest.raises(SlurmParseError):
        parse_tres_list("cpu=1,gres/gpu")
    with pytest.raises(SlurmParseError):
        gpus_from_tres("gres/gpu=two")


@pytest.mark.parametrize(
    ("tpj", "tpn", "req"),
    [
        ("gres:gpu:a100:1", "", GpuRequest(1, "a100", "job")),
        ("gres/gpu:a100:1", "", GpuRequest(1, "a100", "job")),
        ("", "gres:gpu:v100:2", GpuRequest(2, "v100", "node")),
        ("", "gres/gpu:1", GpuRequest(1, None, "node")),
        ("gres:gpu:1", "", GpuRequest(1, None, "job")),
        ("", "gres:mps:50", GpuRequest(0, None, "node", 50)),
        ("", "", None),
    ],
)
def test_gpu_request(tpj: str, tpn: str, req: GpuRequest | None) -> None:
    assert gpu_request(tpj, tpn) == req


def test_builders_follow_version_prefix() -> None:
    assert gres_prefix((22, 5)) == "gres:" and gres_prefix((23, 2)) == "gres:"
    assert gres_prefix((23, 11)) == "gres/" and gres_prefix((24, 11)) == "gres/"
    assert format_gpu_tres(2, "v100", (22, 5)) == "gres:gpu:v100:2"
    assert format_gpu_tres(1, None, (24, 11)) == "gres/gpu:1"
    assert format_mps_tres(50, (22, 5)) == "gres:mps:50"
    assert format_request(GpuRequest(4, "a100", "node", 0), (24, 11)) == "gres/gpu:a100:4"


@pytest.mark.parametrize("version", [(22, 5), (24, 11)])
@pytest.mark.parametrize("req", [GpuRequest(4, "a100", "job"), GpuRequest(1, None, "node"),
                                 GpuRequest(0, None, "node", 50)])
def test_build_then_parse_round_trips(version: tuple[int, int], req: GpuRequest) -> None:
    text = format_request(req, version)
    tpj, tpn = (text, "") if req.scope == "job" else ("", text)
    assert gpu_request(tpj, tpn) == req


def test_gpus_of_untracked_types_are_kept_beside_the_tracked_ones() -> None:
    """AccountingStorageTRES may list gres/gpu:a100 and not v100: a job holding 2 of each has
    gres/gpu=4 and gres/gpu:a100=2, and the 2 others are untyped GPUs, not lost."""
    assert gpus_from_tres("cpu=4,gres/gpu=4,gres/gpu:a100=2") == {"a100": 2, "": 2}
    assert gpus_from_tres("gres/gpu=4,gres/gpu:a100=2,gres/gpu:v100=2") == {"a100": 2, "v100": 2}
    assert gpus_from_tres("gres/gpu=2") == {"": 2}
    assert gpus_from_tres("gres/gpu:t4=1,gres/gpu=1") == {"t4": 1}


def test_gpu_shards_in_tres_node_gres_and_requests() -> None:
    """Slurm 22.05's strings (local-22.05/shard-*): AllocTRES gres/shard=4, node Gres
    gpu:a100:4,shard:a100:32 (the GPUs' type copied to the shards), TresPerNode gres:shard:4."""
    assert shards_from_tres("billing=1,cpu=1,gres/shard=4,node=1") == 4
    assert shards_from_tres({"gres:shard": "2"}) == 2
    assert shards_from_tres("billing=1,cpu=1,gres/mps=50,node=1") == 0
    assert gres_shard_count("gpu:a100:4,mps:a100:400,shard:a100:32") == 32
    assert gres_shard_count("gpu:a100:4,shard:32(S:0)") == 32
    assert gres_shard_count("gpu:v100:4,mps:v100:400") == 0
    assert requested_shards(None, "gres:shard:4") == 4
    assert requested_shards("gres/shard:2", None) == 2
    assert requested_shards("", "gres:mps:10,gres:shard:2") == 2
    assert requested_shards("", "gres:gpu:a100:1") == 0
    # the daemon's view: a job on shards alone asks for no GPU (it plans whole GPUs and MPS)
    assert gpu_request(None, "gres:shard:4") is None
    assert gpu_request(None, "gres:mps:10,gres:shard:2") == GpuRequest(0, None, "node", 10)
