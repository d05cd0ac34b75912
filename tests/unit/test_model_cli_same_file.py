"""`hase model train/refit`: two outputs naming one file, or an output naming an input, are
refused before any work. Each output is staged and renamed over its path, so with one file
named twice the first rename replaced it and the second failed (or a registry's versions, or an
input's rows, were lost under the model file)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_hase.predict.dataset import read_csv
from slurm_hase.predict.descriptor import WorkloadDescriptor
from slurm_hase.predict.modelfile import load_predictor
from slurm_hase.predict.registry import ModelRegistry
from tests.conftest import run_main as _main

ITERS = 2000


@pytest.fixture()
def small(tmp_path: Path, fixtures_dir: Path) -> Path:
    """A copy of the real measurement fixture (a site's CSV)."""
    path = tmp_path / "site.csv"
    path.write_bytes((fixtures_dir / "predict" / "measurements_small.csv").read_bytes())
    return path


@pytest.fixture()
def sacct(tmp_path: Path, fixtures_dir: Path, small: Path) -> Path:
    """The captured 24.11 `sacct --json` with its completed job 1 carrying the descriptor of a
    real exclusive Gavel row and that row's measured time (x ITERS iterations) as elapsed."""
    m = next(r for r in read_csv(small) if r.desc.model and not r.desc.corunner_gflops
             and r.desc.num_gpus == 1 and r.gpu == "v100")
    doc = json.loads((fixtures_dir / "slurm" / "24.11" / "sacct.json").read_text())
    job = next(j for j in doc["jobs"] if j["job_id"] == 1)
    job["comment"]["job"] = WorkloadDescriptor(model=m.desc.model, batch_size=m.desc.batch_size,
                                               iterations=ITERS).to_comment()
    job["time"]["elapsed"] = round(m.iter_time_s * ITERS)
    for t in job["tres"]["allocated"]:
        if t["name"].startswith("gpu:"):
            t["name"] = "gpu:v100"
    path = tmp_path / "sacct.json"
    path.write_text(json.dumps(doc))
    return path


def test_refit_refuses_one_file_for_the_model_and_the_rows(
    tmp_path: Path, small: Path, sacct: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "site-model.json"
    out.write_text("the old model")
    code, _o, err = _main(["model", "refit", "--data", str(small), "--sacct-json", str(sacct),
                           "--out", str(out), "--save-rows", str(out)], capsys)
    assert code == 2, err
    assert "--save-rows and --out name the same file" in err
    assert out.read_text() == "the old model"


def test_refit_refuses_to_write_the_rows_over_a_data_file(
    tmp_path: Path, small: Path, sacct: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    before = small.read_bytes()
    out = tmp_path / "site-model.json"
    code, _o, err = _main(["model", "refit", "--data", str(small), "--sacct-json", str(sacct),
                           "--out", str(out), "--save-rows", str(tmp_path / "." / small.name)], capsys)
    assert code == 2, err
    assert "is also --data" in err
    assert small.read_bytes() == before and not out.exists()  # its 426 rows not cut to this harvest


def test_train_refuses_one_file_for_the_model_and_the_registry(
    tmp_path: Path, small: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    reg = tmp_path / "models.sqlite"
    ModelRegistry(reg).save(load_predictor(), note="the shipped model, kept as version 1")
    code, _o, err = _main(["model", "train", "--data", str(small), "--out", str(reg),
                           "--registry", str(reg)], capsys)
    assert code == 2, err
    assert "--registry and --out name the same file" in err
    assert [v.note for v in ModelRegistry.read_versions(reg)] == ["the shipped model, kept as version 1"]
