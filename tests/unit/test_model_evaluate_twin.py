"""`hase model evaluate --model` scores what the model predicts: on a GPU type without training
rows whose catalog figures equal a measured type's (A100 PCIe 40 GB beside the A100 SXM 40 GB),
``Predictor.predict`` answers as the measured type, and the scoring must too."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from slurm_hase.predict.catalog import resolve_gpu
from slurm_hase.predict.dataset import SHIPPED_DATA, Measurement, read_csv, write_csv
from slurm_hase.predict.evaluate import predict_rows
from slurm_hase.predict.modelfile import load_predictor
from tests.conftest import run_main as _main


@pytest.fixture(scope="module")
def a100_rows() -> list[Measurement]:
    """The shipped data's A100 SXM 40 GB measurements (MLPerf)."""
    rows = [m for m in read_csv(SHIPPED_DATA) if m.gpu == "a100"]
    assert rows
    return rows


def _as_pcie(rows: list[Measurement]) -> list[Measurement]:
    """The same measurements filed under the A100 PCIe 40 GB (the shipped model has no rows of it)."""
    return [dataclasses.replace(m, gpu="a100pcie") for m in rows]


def test_scoring_uses_the_prediction_users_get(a100_rows: list[Measurement]) -> None:
    pred = load_predictor()
    pcie = _as_pcie(a100_rows)
    assert pred.twin(resolve_gpu("a100pcie")).key == "a100"  # the premise
    assert predict_rows(pred, pcie) == pytest.approx(
        [pred.predict(m.desc, [m.gpu])[m.gpu].iter_time_p50 for m in pcie], rel=1e-12)


def test_evaluate_reads_the_same_mape_on_identical_hardware(
    a100_rows: list[Measurement], tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    sxm, pcie = tmp_path / "sxm.csv", tmp_path / "pcie.csv"
    write_csv(a100_rows, sxm)
    write_csv(_as_pcie(a100_rows), pcie)
    scores = []
    for path in (sxm, pcie):
        code, out, err = _main(["model", "evaluate", "--data", str(path), "--model", "shipped", "--json"],
                               capsys)
        assert code == 0, err
        scores.append(json.loads(out)["model"])
    assert scores[1]["mape"] == scores[0]["mape"]
    assert scores[1]["per_gpu"] == {"a100pcie": scores[0]["per_gpu"]["a100"]}
