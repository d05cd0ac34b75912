"""Cluster spec parsing."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hase.errors import ConfigError
from slurm_hase.sim.cluster import expand_names, load_cluster, uniform_cluster


def test_expand_names() -> None:
    assert expand_names("a100-[1-3,7]") == ["a100-1", "a100-2", "a100-3", "a100-7"]
    assert expand_names("n[01-02]") == ["n01", "n02"]
    with pytest.raises(ConfigError):
        expand_names("bad-[x]")


def test_load_cluster_ranges_counts_shares_billing(tmp_path: Path) -> None:
    p = tmp_path / "c.toml"
    p.write_text('''
[[nodes]]
name = "a100-[1-2]"
gpu_type = "A100"
gpus = 4
features = ["ampere"]

[[nodes]]
count = 3
gpu_type = "v100"
gpus = 8

[[accounts]]
name = "physics"
shares = 2

[billing]
a100 = 4.0
''')
    spec = load_cluster(p)
    assert spec.gpus_by_type == {"a100": 8, "v100": 24}
    assert [n.name for n in spec.nodes][:3] == ["a100-1", "a100-2", "v100-1"]
    assert spec.nodes[0].features == ("a100", "ampere")
    assert spec.shares == {"physics": 2.0} and spec.billing == {"a100": 4.0}


def test_unknown_gpu_type_refused_with_close_matches(tmp_path: Path) -> None:
    p = tmp_path / "c.toml"
    p.write_text('[[nodes]]\nname = "x-1"\ngpu_type = "a1000"\ngpus = 4\n')
    with pytest.raises(ConfigError, match=r"nodes\[0\]\.gpu_type.*did you mean.*a100"):
        load_cluster(p)


def test_bad_fields_named(tmp_path: Path) -> None:
    p = tmp_path / "c.toml"
    p.write_text('[[nodes]]\nname = "x-1"\ngpu_type = "t4"\ngpus = 0\n')
    with pytest.raises(ConfigError, match="gpus"):
        load_cluster(p)
    p.write_text("nodes = 3 = 4\n")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_cluster(p)


def test_uniform_cluster() -> None:
    spec = uniform_cluster({"k80": 10, "v100": 8}, gpus_per_node=4)
    assert spec.gpus_by_type == {"k80": 10, "v100": 8}
    assert [n.gpus for n in spec.nodes if n.gpu_type == "k80"] == [4, 4, 2]


def test_the_local_clusters_spec_loads_as_it_is() -> None:
    """One shape: `hase cluster up`'s spec file (partitions "ALL" and a hostlist string, mps as
    the node's Gres count, cpus/ports the simulator ignores) is a cluster the simulator runs."""
    from slurm_hase.slurm.localcluster import spec as local

    path = Path(local.__file__).with_name("default_cluster.toml")
    sim, real = load_cluster(path), local.load_spec(path)
    assert [n.name for n in sim.nodes] == real.node_names
    assert sim.gpus_by_type == {"a100": 8, "t4": 8, "v100": 8}
    by_name = {n.name: n for n in sim.nodes}
    assert by_name["t4-1"].partitions == ("gpu", "debug")
    assert by_name["a100-1"].partitions == ("gpu",)
    assert by_name["a100-1"].features == ("a100", "ampere")
    group = next(g for g in real.node_groups if g.gpu_type == "a100")
    assert group.mps == 400 and by_name["a100-1"].mps == 100  # 400 over 4 GPUs
    assert sim.shares == {a.name: float(a.shares) for a in real.accounts}


@pytest.mark.parametrize(("nodes", "expect"), [
    ('"ALL"', ["a-1", "a-2", "b-1"]),
    ('"a-[1-2]"', ["a-1", "a-2"]),
    ('["a-1", "b-1"]', ["a-1", "b-1"]),
])
def test_partition_nodes_forms(tmp_path: Path, nodes: str, expect: list[str]) -> None:
    p = tmp_path / "c.toml"
    p.write_text('[[nodes]]\nname = "a-[1-2]"\ngpu_type = "t4"\ngpus = 2\n'
                 '[[nodes]]\nname = "b-1"\ngpu_type = "t4"\ngpus = 2\n'
                 '[[partitions]]\nname = "gpu"\nnodes = "ALL"\n'
                 f'[[partitions]]\nname = "p"\nnodes = {nodes}\n')
    spec = load_cluster(p)
    assert [n.name for n in spec.nodes if "p" in n.partitions] == expect


@pytest.mark.parametrize("partitions", [
    '[[partitions]]\nname = "gpu"\nnodes = "a-[1-2]"\n',  # b-1 in no partition of the jobs
    '[[partitions]]\nname = "batch"\nnodes = "ALL"\ndefault = true\n',  # no "gpu" at all
    '[[partitions]]\nname = "p"\nnodes = "a-[1-2]"\n',  # a-1, a-2 only in p
])
def test_nodes_outside_the_jobs_partition_are_refused(tmp_path: Path, partitions: str) -> None:
    """Every simulated job goes to partition "gpu" and may start on any node: a node outside
    it would take jobs Slurm never gives it, so such a file is refused with the nodes named."""
    p = tmp_path / "c.toml"
    p.write_text('[[nodes]]\nname = "a-[1-2]"\ngpu_type = "t4"\ngpus = 2\n'
                 '[[nodes]]\nname = "b-1"\ngpu_type = "t4"\ngpus = 2\n' + partitions)
    with pytest.raises(ConfigError, match=r"node\(s\) \((a-1|b-1).*\) are not in partition 'gpu'"):
        load_cluster(p)


def test_partition_naming_an_unknown_node_and_bad_mps_are_refused(tmp_path: Path) -> None:
    p = tmp_path / "c.toml"
    node = '[[nodes]]\nname = "a-[1-2]"\ngpu_type = "t4"\ngpus = 4\n'
    p.write_text(node + '[[partitions]]\nname = "p"\nnodes = "a-[1-3]"\n')
    with pytest.raises(ConfigError, match=r"partitions\[0\]\.nodes: unknown nodes a-3"):
        load_cluster(p)
    p.write_text(node + "mps = 150\n")
    with pytest.raises(ConfigError, match=r"mps: .*positive multiple of its 4 GPUs, e.g. 400"):
        load_cluster(p)


def test_two_count_groups_of_one_type_are_told_to_take_names(tmp_path: Path) -> None:
    """V100 nodes of 4 GPUs beside V100 nodes of 8, both written with count: both groups would
    be named v100-1 ...; the error names the two tables and the fix, not just 'v100-1'."""
    p = tmp_path / "c.toml"
    p.write_text('[[nodes]]\ncount = 2\ngpu_type = "v100"\ngpus = 4\n'
                 '[[nodes]]\ncount = 2\ngpu_type = "v100"\ngpus = 8\n')
    with pytest.raises(ConfigError) as exc:
        load_cluster(p)
    assert str(exc.value) == (
        f"{p}: nodes[1]: node 'v100-1' is also in nodes[0] (a count group's nodes are v100-1 "
        "...: give each group of the same GPU type its own name beside count)")
    p.write_text('[[nodes]]\ncount = 2\ngpu_type = "v100"\ngpus = 4\n'
                 '[[nodes]]\nname = "big"\ncount = 2\ngpu_type = "v100"\ngpus = 8\n')
    assert [n.name for n in load_cluster(p).nodes] == ["v100-1", "v100-2", "big-1", "big-2"]
    p.write_text('[[nodes]]\nname = "n-[1,1]"\ngpu_type = "v100"\ngpus = 4\n')
    with pytest.raises(ConfigError, match=r"nodes\[0\]: node 'n-1' is named twice in this table"):
        load_cluster(p)
