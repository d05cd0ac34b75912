"""Cluster spec validation and config rendering (no Slurm needed)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from slurm_hase.errors import ClusterError, ConfigError
from slurm_hase.slurm import hostlist
from slurm_hase.slurm.localcluster.manager import LocalCluster
from slurm_hase.slurm.localcluster.paths import ClusterPaths
from slurm_hase.slurm.localcluster.render import render_configs
from slurm_hase.slurm.localcluster.spec import load_spec, parse_spec


def test_default_spec_is_heterogeneous() -> None:
    spec = load_spec(None)
    assert spec.gpu_types == ["a100", "t4", "v100"]
    assert len(spec.node_names) == 6
    assert {a.name for a in spec.accounts} == {"teama", "teamb"}
    assert spec.node_port("a100-1") == 17001 and spec.node_port("t4-2") == 17006


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"nodes": [{"name": "a-1", "gpus": 4}]}, "nodes[0]: missing required field 'gpu_type'"),
        ({"nodes": [{"name": "a-1", "gpu_type": "a100", "gpus": "four"}]}, "nodes[0].gpus"),
        ({"nodes": [{"name": "a-[2-1]", "gpu_type": "a100", "gpus": 1}]}, "nodes[0].name"),
        ({"nodes": [{"name": "a-1", "gpu_type": "A100", "gpus": 1}]}, "nodes[0].gpu_type"),
        ({"nodes": [{"name": "a-1", "gpu_type": "a100", "gpus": 0}]}, "nodes[0].gpus"),
        ({"port_base": 80, "nodes": []}, "port_base"),
        ({"nodes": [{"name": "a-1", "gpu_type": "a100", "gpus": 1}],
          "partitions": [{"name": "p", "nodes": "zz-1"}]}, "partitions[0].nodes"),
        ({}, "missing required field 'nodes'"),
    ],
)
def test_bad_spec_names_the_field(doc: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace("[", r"\[").replace("]", r"\]")):
        parse_spec(doc)


def test_bad_toml_is_a_config_error(tmp_path: Path) -> None:
    bad = tmp_path / "c.toml"
    bad.write_text("nodes = [\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_spec(bad)


def test_hostlist_roundtrip() -> None:
    names = hostlist.expand("a100-[1-2,4],t4-[08-10],login")
    assert names == ["a100-1", "a100-2", "a100-4", "t4-08", "t4-09", "t4-10", "login"]
    assert hostlist.expand(hostlist.compress(["n1", "n2", "n3", "n5"])) == ["n1", "n2", "n3", "n5"]
    with pytest.raises(ValueError):
        hostlist.expand("a[1-")


def test_rendered_slurm_conf_has_every_node_and_type(tmp_path: Path) -> None:
    spec = load_spec(None)
    files = render_configs(spec, ClusterPaths(tmp_path), db_password="x", cgroup_plugin="autodetect")
    conf = files["slurm.conf"]
    assert "NodeName=a100-[1-2] NodeHostname=localhost" in conf
    assert "Port=17001-17002" in conf and "Gres=gpu:t4:4,mps:400" in conf
    assert "AccountingStorageTRES=gres/gpu,gres/mps,gres/gpu:a100,gres/gpu:t4,gres/gpu:v100\n" in conf
    assert "File=" in files["gres.conf"] and "Name=mps Count=400" in files["gres.conf"]
    assert files["cgroup.conf"].strip().endswith("CgroupPlugin=autodetect")


def test_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    spec = parse_spec({"port_base": 23817, "slurmd_port_base": 23901,
                       "nodes": [{"name": "x-1", "gpu_type": "t4", "gpus": 1}]})
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 23817))
        busy.listen()
        cluster = LocalCluster(spec, ClusterPaths(tmp_path))
        with pytest.raises(ClusterError, match=r"port 23817 \(wanted by slurmctld\) is already in use"):
            cluster._check_ports({})


def test_partition_nodes_may_be_a_list_as_the_simulator_reads_them() -> None:
    doc = {"nodes": [{"name": "a100-[1-2]", "gpu_type": "a100", "gpus": 4},
                     {"name": "t4-1", "gpu_type": "t4", "gpus": 4}],
           "partitions": [{"name": "gpu"}, {"name": "mixed", "nodes": ["a100-2", "t4-1"]}]}
    spec = parse_spec(doc)
    assert [(p.name, p.nodes) for p in spec.partitions] == [("gpu", "ALL"),
                                                            ("mixed", "a100-2,t4-1")]
    doc["partitions"] = [{"name": "gpu", "nodes": ["a100-9"]}]
    with pytest.raises(ConfigError, match=r"partitions\[0\]\.nodes: unknown nodes a100-9"):
        parse_spec(doc)


GROUP = {"name": "a-1", "gpu_type": "a100", "gpus": 1}


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"colour": "blue", "nodes": [GROUP]}, "c.toml: unknown key(s) 'colour'; known: name"),
        ({"nodes": [{**GROUP, "gpu": 4}]},
         "c.toml: nodes[0]: unknown key(s) 'gpu' (did you mean 'gpus'?)"),
        ({"nodes": [GROUP], "accounts": [{"name": "a", "share": 5}]},
         "c.toml: accounts[0]: unknown key(s) 'share' (did you mean 'shares'?)"),
        ({"nodes": [GROUP], "partitions": [{"name": "p", "node": "ALL"}]},
         "c.toml: partitions[0]: unknown key(s) 'node'"),
        ({"nodes": [GROUP], "partitions": ["gpu"]}, "c.toml: partitions[0]: expected a table"),
        ({"nodes": [GROUP], "accounts": [3]}, "c.toml: accounts[0]: expected a table"),
        ({"nodes": [{"gpu_type": "t4", "gpus": 4}]},
         "c.toml: nodes[0]: missing required field 'name'"),
        ({"nodes": [{**GROUP, "gpus": True}]}, "c.toml: nodes[0].gpus: expected int"),
        ({"nodes": [{**GROUP, "mps": -4}]}, "c.toml: nodes[0].mps: must be 0 or more"),
        ({"nodes": [GROUP], "accounts": [{"name": "a", "shares": -2}]},
         "c.toml: accounts[0].shares: must be positive"),
    ],
)
def test_spec_errors_name_the_file_table_and_key(doc: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_spec(doc, "c.toml")
    assert str(exc.value).startswith(message)


def test_the_simulators_billing_table_is_accepted_and_ignored() -> None:
    spec = parse_spec({"nodes": [GROUP], "billing": {"a100": 4.0}}, "c.toml")
    assert spec.gpu_types == ["a100"]


def test_a_spec_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    bad = tmp_path / "c_bin.toml"
    bad.write_bytes(b"name = \"\xff\"\n")
    with pytest.raises(ConfigError, match=r"c_bin.toml: not UTF-8 text \(byte 0xff at offset 8\)"):
        load_spec(bad)


def test_prolog_and_epilog_go_into_slurm_conf(tmp_path: Path) -> None:
    spec = parse_spec({"nodes": [GROUP], "prolog": "/etc/hase/p.sh", "epilog": "/etc/hase/e.sh"})
    conf = render_configs(spec, ClusterPaths(tmp_path), db_password="x",
                          cgroup_plugin="autodetect")["slurm.conf"]
    assert "\nProlog=/etc/hase/p.sh\nEpilog=/etc/hase/e.sh\n" in conf
    plain = render_configs(parse_spec({"nodes": [GROUP]}), ClusterPaths(tmp_path), db_password="x",
                           cgroup_plugin="autodetect")["slurm.conf"]
    assert "Prolog=" not in plain and "Epilog=" not in plain


@pytest.mark.parametrize("value", ["p.sh", "/etc/my prolog.sh", 3])
def test_a_bad_prolog_is_refused(value: object) -> None:
    with pytest.raises(ConfigError, match=r"c.toml.prolog: expected"):
        parse_spec({"nodes": [GROUP], "prolog": value}, "c.toml")


def test_gpu_device_nodes_are_character_devices(tmp_path: Path) -> None:
    """Slurm reads a char device node as a GPU (a regular file it hands to no job); an existing
    regular file is replaced, and an existing node kept."""
    import os
    import stat

    from slurm_hase.slurm.localcluster.paths import NVIDIA_MAJOR, make_gpu_device

    plain, node = tmp_path / "n-nvidia0", tmp_path / "n-nvidia3"
    make_gpu_device(plain, 0, False)
    assert plain.is_file() and plain.stat().st_size == 0
    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    node.write_text("")
    make_gpu_device(node, 3, True)
    st = node.stat()
    assert stat.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (NVIDIA_MAJOR, 3)
    inode = st.st_ino
    make_gpu_device(node, 3, True)
    assert node.stat().st_ino == inode
    assert parse_spec({"nodes": [GROUP]}).gpu_device_nodes  # the default
    assert not parse_spec({"nodes": [GROUP], "gpu_device_nodes": False}).gpu_device_nodes
    with pytest.raises(ConfigError, match="gpu_device_nodes: expected bool"):
        parse_spec({"nodes": [GROUP], "gpu_device_nodes": "yes"})
