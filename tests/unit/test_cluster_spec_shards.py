"""A local cluster node may offer GPU shards (gres/shard, Slurm >= 22.05): `shards = N` in the
spec, the node's total, as slurm.conf's Gres=...,shard:N writes it (no Slurm needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hase.errors import ConfigError
from slurm_hase.sim.cluster import parse_cluster
from slurm_hase.slurm.localcluster.paths import ClusterPaths
from slurm_hase.slurm.localcluster.render import render_configs
from slurm_hase.slurm.localcluster.spec import load_spec, parse_spec

SPEC = Path(__file__).resolve().parents[1] / "fixtures" / "slurm" / "shard-cluster.toml"


def _render(spec_path: Path | None, tmp_path: Path) -> dict[str, str]:
    return render_configs(load_spec(spec_path), ClusterPaths(tmp_path), db_password="x",
                          cgroup_plugin="autodetect")


def test_the_shard_cluster_renders_shards_beside_the_gpus(tmp_path: Path) -> None:
    spec = load_spec(SPEC)
    assert (spec.name, spec.port_base, spec.slurmd_port_base) == ("haseshard", 20817, 21001)
    assert [(g.expr, g.shards, g.mps) for g in spec.node_groups] == [("a100-1", 32, 0),
                                                                      ("v100-1", 0, 400)]
    files = _render(SPEC, tmp_path)
    conf = files["slurm.conf"]
    assert "GresTypes=gpu,mps,shard\n" in conf
    assert "AccountingStorageTRES=gres/gpu,gres/mps,gres/shard,gres/gpu:a100,gres/gpu:v100\n" in conf
    assert " Gres=gpu:a100:4,shard:32 " in conf and " Gres=gpu:v100:4,mps:400 " in conf
    assert (f"NodeName=a100-1 Name=shard Count=32 File={tmp_path}/dev/a100-1-nvidia[0-3]\n"
            in files["gres.conf"])
    assert "Name=shard" not in files["gres.conf"].split("NodeName=v100-1", 1)[1]


def test_its_ports_are_its_own() -> None:
    mig = load_spec(SPEC.parent / "mig-cluster.toml")
    default = load_spec(None)
    shard = load_spec(SPEC)
    ports = [{s.slurmctld_port, s.slurmdbd_port, s.mariadb_port,
              *(s.node_port(n) for n in s.node_names)} for s in (default, mig, shard)]
    assert not ports[2] & (ports[0] | ports[1])


def test_a_cluster_without_shards_renders_as_before() -> None:
    """The default cluster's configs must not change: a running cluster whose rendered configs
    differ refuses `hase cluster up` until it is taken down."""
    files = _render(None, Path("/srv/c"))
    assert "shard" not in files["slurm.conf"] and "shard" not in files["gres.conf"]
    assert "GresTypes=gpu,mps\n" in files["slurm.conf"]


GROUP = {"name": "a-1", "gpu_type": "a100", "gpus": 4}


@pytest.mark.parametrize(
    ("node", "message"),
    [
        ({**GROUP, "shards": -8}, "c.toml: nodes[0].shards: must be 0 or more, got -8"),
        ({**GROUP, "shards": 10}, "c.toml: nodes[0].shards: the node's shard count (as in "
                                  "Gres=...,shard:N) must be a multiple of its 4 GPUs"),
        ({**GROUP, "shards": "8"}, "c.toml: nodes[0].shards: expected int"),
        ({**GROUP, "shard": 8}, "c.toml: nodes[0]: unknown key(s) 'shard' (did you mean "
                                "'shards'?)"),
    ],
)
def test_bad_shards_name_the_key(node: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_spec({"nodes": [node]}, "c.toml")
    assert str(exc.value).startswith(message)


def test_shards_beside_mps_on_one_node_are_taken_as_slurm_takes_them() -> None:
    """Slurm 22.05 came up with shard:32 and mps:400 on one node and ran jobs on both
    (local-22.05/shard-mps-same-node-*), so the spec does not refuse it."""
    spec = parse_spec({"nodes": [{**GROUP, "shards": 32, "mps": 400}]}, "c.toml")
    assert (spec.node_groups[0].shards, spec.node_groups[0].mps) == (32, 400)


def test_the_simulator_has_no_shards() -> None:
    with pytest.raises(ConfigError, match="unknown key"):
        parse_cluster({"nodes": [{**GROUP, "shards": 8}]}, "c.toml")
