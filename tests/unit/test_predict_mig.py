"""MIG instances as GPU types (predict/mig.py): every spelling Slurm sites and nvidia-smi use
resolves to its GPU's catalog entry scaled to the instance; bad names say what is wrong. Then
what rests on it, on sacct output captured from a local cluster with a MIG-named GPU type
(local-22.05 and local-24.11/sacct-mig.*: one job on a full A100, two on seven a100_1g.5gb
instances, each job 4 s on 22.05 and 5 s on 24.11)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_hase.cli.main import cli
from slurm_hase.daemon.seed import add_service
from slurm_hase.errors import UnknownGpuError
from slurm_hase.policy.usage import UsageLedger
from slurm_hase.predict.catalog import resolve_gpu
from slurm_hase.predict.mig import gpu_share
from slurm_hase.slurm import commands
from slurm_hase.slurm.localcluster.spec import parse_spec
from slurm_hase.slurm.parse_sacct_text import parse_sacct_parsable
from slurm_hase.slurm.parse_text import parse_scontrol_nodes


@pytest.mark.parametrize("name", ["a100_1g.5gb", "A100_1G.5GB", "nvidia_a100-sxm4-40gb_1g.5gb",
                                  "NVIDIA A100-SXM4-40GB MIG 1g.5gb", "a100-mig-1g.5gb",
                                  "a100_1g.5gb+me"])
def test_every_spelling_of_an_a100_1g_instance(name: str) -> None:
    spec, gpu = resolve_gpu(name), resolve_gpu("a100")
    assert spec.key == "a100_1g.5gb" and spec.name == "A100 SXM4 40 GB MIG 1g.5gb"
    # compute: 1 of the A100's 7 slices; memory as named; bandwidth: 5 of its 40 GB
    assert spec.peak_tflops("fp16") == pytest.approx(gpu.peak_tflops("fp16") / 7)
    assert spec.fp32_tflops == pytest.approx(gpu.fp32_tflops / 7)
    assert spec.sms == round(gpu.sms / 7)
    assert (spec.memory_gb, spec.mem_bw_gbs) == (5.0, pytest.approx(gpu.mem_bw_gbs / 8))
    assert (spec.generation, spec.compute_capability) == (gpu.generation, gpu.compute_capability)
    assert "MIG" in spec.source and gpu.name in spec.source


def test_other_gpus_and_sizes() -> None:
    a30 = resolve_gpu("a30_2g.12gb")  # A30: 4 slices
    assert a30.fp16_tflops == pytest.approx(resolve_gpu("a30").fp16_tflops / 2)
    assert gpu_share("a30_2g.12gb") == 0.5 and gpu_share("h100_3g.40gb") == pytest.approx(3 / 7)
    # a profile larger than the 40 GB A100's memory is of the 80 GB one
    big = resolve_gpu("a100_7g.80gb")
    assert big.key == "a100m80_7g.80gb" and big.mem_bw_gbs == resolve_gpu("a100m80").mem_bw_gbs
    assert resolve_gpu("nvidia_h100_80gb_hbm3_1g.10gb").key == "h100_1g.10gb"
    assert gpu_share("a100") == gpu_share("t4") == 1.0


@pytest.mark.parametrize(("name", "says"), [
    ("v100_1g.5gb", "Tesla V100 SXM2 16 GB has no MIG; MIG instances are known of a100"),
    ("1g.5gb", "a MIG instance type names its GPU); did you mean a100_1g.5gb?"),
    ("a100_8g.40gb", "A100 SXM4 40 GB has 7 compute slices and 40 GB"),
    ("a100_1g.200gb", "has 7 compute slices"),
    ("zz99_1g.5gb", "unknown GPU type 'zz99'"),
])
def test_bad_mig_names_say_what_is_wrong(name: str, says: str) -> None:
    with pytest.raises(UnknownGpuError) as err:
        resolve_gpu(name)
    assert says in str(err.value)
    assert gpu_share(name) == 1.0  # nothing to scale by: counted as a GPU


RUN_S = {"22.05": 4, "24.11": 5}  # each job's Elapsed in that capture


@pytest.mark.parametrize("version", sorted(RUN_S))
def test_report_weighs_a_mig_instance_as_its_part_of_the_gpu(fixtures_dir: Path,
                                                             version: str) -> None:
    """`hase report usage --weights catalog` (the default): the 1g.5gb instance-hours weigh 1/7
    of an A100's. Before MIG types resolved, they weighed 1 (named as defaulted)."""
    saved = fixtures_dir / "slurm" / f"local-{version}" / "sacct-mig.json"
    run = RUN_S[version]
    res = CliRunner().invoke(cli, ["report", "usage", "--input", str(saved), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["speed_weights"] == {"a100": 1.0, "a100_1g.5gb": pytest.approx(1 / 7)}
    assert out["defaulted_weights"] == []
    rows = {r["account"]: r for r in out["accounts"]}
    assert rows["teama"]["gpu_hours"] == {"a100": pytest.approx(run / 3600, abs=1e-6)}
    # 2 instances and 1 instance, each for the run
    assert rows["teamb"]["gpu_hours"] == {"a100_1g.5gb": pytest.approx(3 * run / 3600, abs=1e-6)}
    assert rows["teamb"]["norm_gpu_hours"] == pytest.approx(3 * run / 3600 / 7, abs=1e-6)


@pytest.mark.parametrize("version", sorted(RUN_S))
def test_usage_ledger_seed_counts_a_mig_instance_as_its_part_of_the_gpu(
        fixtures_dir: Path, version: str) -> None:
    raw = (fixtures_dir / "slurm" / f"local-{version}" / "sacct-mig.txt").read_text()
    records = parse_sacct_parsable(raw, delimiter=commands.SACCT_DELIMITER)
    assert sorted((r.alloc_gpus for r in records), key=str) == sorted(
        [{"a100": 1}, {"a100_1g.5gb": 2}, {"a100_1g.5gb": 1}], key=str)
    until = max(float(r.end_time or 0) for r in records)
    ledger = UsageLedger(half_life_s=1e6)  # decay over seconds: a few parts in a million
    assert add_service(ledger, records, until) == 3
    run = RUN_S[version]
    assert ledger.usage()["teama"] == pytest.approx(run, rel=1e-4)  # 1 GPU for the run
    assert ledger.usage()["teamb"] == pytest.approx(3 * run / 7, rel=1e-4)  # 3 x the run x 1/7
    # the nodes as scontrol shows them: the instances are the node's GPUs, of the MIG type
    nodes = {n.name: n for n in parse_scontrol_nodes(
        (fixtures_dir / "slurm" / f"local-{version}" / "scontrol-show-node-mig.txt").read_text())}
    assert nodes["mig-1"].gpus == {"a100_1g.5gb": 7} and nodes["a100-1"].gpus == {"a100": 4}
    assert nodes["mig-1"].features == ("a100_1g.5gb",)


def test_local_cluster_spec_takes_a_mig_type() -> None:
    spec = parse_spec({"nodes": [{"name": "mig-1", "gpu_type": "a100_1g.5gb", "gpus": 7}],
                       "partitions": [{"name": "gpu", "nodes": "ALL", "default": True}]})
    assert spec.gpu_types == ["a100_1g.5gb"] and spec.node_groups[0].features == ("a100_1g.5gb",)
