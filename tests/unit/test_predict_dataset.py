"""Canonical measurement CSV: reading, validation with row numbers, writing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_hase.errors import DataError
from slurm_hase.predict.catalog import DATA_DIR
from slurm_hase.predict.dataset import parse_csv, read_csv, write_csv
from slurm_hase.predict.loaders import load_gavel, load_mlperf


def test_fixture_reads(fixtures_dir: Path) -> None:
    rows = read_csv(fixtures_dir / "predict" / "measurements_small.csv")
    assert len(rows) > 300
    assert {m.gpu for m in rows} >= {"k80", "p100", "v100"}
    assert any(m.desc.corunner_gflops for m in rows)
    assert all(m.iter_time_s > 0 and m.desc.gflops_per_iter for m in rows)


def test_missing_target_column() -> None:
    with pytest.raises(DataError, match="iter_time_s"):
        parse_csv("gpu,model,batch_size\nv100,resnet50,32\n", "site.csv")


def test_negative_batch_size_names_row() -> None:
    text = "gpu,model,batch_size,iter_time_s\nv100,resnet50,32,0.2\nv100,resnet50,-4,0.1\n"
    with pytest.raises(DataError, match=r"site.csv: row 3: batch_size"):
        parse_csv(text, "site.csv")


@pytest.mark.parametrize(
    ("line", "what"),
    [("a1000,resnet50,32,0.2", "unknown GPU"), ("v100,resnet50,32,", "iter_time_s"),
     ("v100,resnet50,32,-1", "iter_time_s"), ("v100,unknownnet,32,0.1", "gflops")],
)
def test_bad_rows(line: str, what: str) -> None:
    with pytest.raises(DataError, match=f"row 2: .*{what}"):
        parse_csv("gpu,model,batch_size,iter_time_s\n" + line + "\n", "x.csv")


def test_optional_values_may_be_empty() -> None:
    rows = parse_csv("gpu,model,gflops_per_iter,params_m,batch_size,precision,mode,num_gpus,corunner_gflops,iter_time_s\n"
                     "t4,,120,,,,,,,0.05\nt4,resnet50,,,,fp16,infer,,10;20,0.01\n")
    assert rows[0].desc.gflops_per_iter == 120 and rows[0].desc.precision == "fp32"
    assert rows[1].desc.corunner_gflops == (10.0, 20.0) and rows[1].desc.mode == "infer"


def test_write_read_round_trip(tmp_path: Path, fixtures_dir: Path) -> None:
    rows = read_csv(fixtures_dir / "predict" / "measurements_small.csv")[:50]
    out = tmp_path / "dir with spaces;$(x)" / "m.csv"
    out.parent.mkdir()
    assert write_csv(rows, out) == 50
    back = read_csv(out)
    assert [(m.gpu, m.model, m.desc.batch_size) for m in back] == [(m.gpu, m.model, m.desc.batch_size) for m in rows]
    assert [m.iter_time_s for m in back] == pytest.approx([m.iter_time_s for m in rows], rel=1e-5)


def test_loaders_on_shared_data(shared_data: Path) -> None:
    gavel = load_gavel(shared_data / "gavel" / "simulation_throughputs.json")
    assert {m.gpu for m in gavel} == {"k80", "p100", "v100"}
    co = [m for m in gavel if m.desc.corunner_gflops]
    assert len(co) > 1000
    mlperf = load_mlperf(shared_data / "mlperf" / "mlperf_inference_results_flat.csv")
    assert len({m.gpu for m in mlperf}) >= 14
    # an H100 runs ResNet-50 inference faster than a T4
    t = {m.gpu: m.iter_time_s for m in mlperf if m.model == "resnet50"}
    assert t["h100"] < t["t4"]


def test_gavel_multi_gpu_rows_are_per_gpu_step_times() -> None:
    """A row's iteration is one step on every GPU: Gavel's steps/s (counted over all workers) is
    divided by the GPU count, so ResNet-50 on 8 V100s is slower per iteration than on one."""
    path = DATA_DIR / "gavel_simulation_throughputs.json"
    raw = json.loads(path.read_text())
    rows = {(m.gpu, m.model, m.desc.batch_size, m.desc.num_gpus): m.iter_time_s
            for m in load_gavel(path, colocated=False)}
    for scale in (2, 4, 8):
        tput = raw["v100"][str(("ResNet-50 (batch size 64)", scale))]["null"]
        assert rows[("v100", "resnet50", 64, scale)] == pytest.approx(scale / tput, rel=1e-9)
    for gpu in ("k80", "p100", "v100"):  # near-linear scaling: 2 GPUs on a K80 are within 2%
        one = rows[(gpu, "resnet50", 64, 1)]
        assert one < rows[(gpu, "resnet50", 64, 8)] < 2.5 * one


def test_shipped_names_the_packaged_training_csv(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """`--data shipped` works from an installed package, where slurm_hase/data/... is no path
    the admin can type; a file named `shipped` is still reachable as ./shipped."""
    from slurm_hase.predict.dataset import data_path, read_many

    monkeypatch.chdir(tmp_path)
    packaged = read_csv(DATA_DIR / "train_shipped.csv")
    assert len(packaged) > 1000
    assert read_csv("shipped") == packaged == read_many(["shipped"])
    assert data_path("./shipped") == Path("shipped")
    (tmp_path / "shipped").write_text("not,a,canonical,csv\n")
    with pytest.raises(DataError, match="shipped"):
        read_csv("./shipped")
