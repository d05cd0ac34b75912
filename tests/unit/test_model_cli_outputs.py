"""`hase model`: output paths checked before any work, all-or-nothing writes, evaluate --baseline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from slurm_hase.errors import DataError, PredictorError, StoreError
from slurm_hase.predict.dataset import Measurement, read_csv, write_csv
from slurm_hase.predict.modelfile import load_predictor, save_model
from slurm_hase.predict.registry import ModelRegistry
from tests.conftest import run_main as _main

SACCT = Path(__file__).resolve().parents[1] / "fixtures" / "slurm" / "24.11" / "sacct.json"



@pytest.fixture()
def small(fixtures_dir: Path) -> str:
    return str(fixtures_dir / "predict" / "measurements_small.csv")


@pytest.fixture()
def no_training(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts training runs: a refused command must not have started any."""
    import slurm_hase.predict.train as train_mod

    calls: list[int] = []

    def fake(*_a: Any, **_k: Any) -> None:
        calls.append(1)
        raise AssertionError("trained although an output path was bad")

    monkeypatch.setattr(train_mod, "train", fake)
    return calls


@pytest.mark.parametrize("args, option", [
    (["train", "--out", "{gone}/x.json"], "--out"),
    (["train", "--out", "{tmp}/x.json", "--registry", "{gone}/reg.sqlite"], "--registry"),
    (["refit", "--sacct-json", str(SACCT), "--out", "{gone}/r.json"], "--out"),
    (["refit", "--sacct-json", str(SACCT), "--out", "{tmp}/r.json", "--save-rows", "{gone}/rows.csv"],
     "--save-rows"),
    (["refit", "--sacct-json", str(SACCT), "--out", "{tmp}/r.json", "--registry", "{gone}/reg.sqlite"],
     "--registry"),
])
def test_output_in_a_missing_folder_is_refused_before_any_work(
    args: list[str], option: str, tmp_path: Path, small: str, no_training: list[int],
    capsys: pytest.CaptureFixture[str],
) -> None:
    gone = tmp_path / "nodir"
    argv = ["model", *(a.format(gone=gone, tmp=tmp_path) for a in args), "--data", small]
    code, _out, err = _main(argv, capsys)
    assert code == 2, err
    assert option in err and f"{gone}/" in err and "does not exist" in err
    assert "Traceback" not in err and no_training == []
    assert list(tmp_path.iterdir()) == []  # nothing written, the folder not created


def test_export_data_checks_its_output_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # an empty --shared folder would fail while loading; the bad --out is reported first
    shared = tmp_path / "shared"
    shared.mkdir()
    code, _out, err = _main(["model", "export-data", "--shared", str(shared),
                             "--out", str(tmp_path / "nodir" / "exp.csv")], capsys)
    assert code == 2 and "--out" in err and "nodir" in err and "does not exist" in err
    assert list(tmp_path.iterdir()) == [shared]


def test_a_registry_that_is_not_a_database_is_refused_before_training(
    tmp_path: Path, small: str, no_training: list[int], capsys: pytest.CaptureFixture[str],
) -> None:
    bad = tmp_path / "reg.sqlite"
    bad.write_bytes(b"not sqlite at all" * 100)
    out = tmp_path / "m.json"
    code, _o, err = _main(["model", "train", "--data", small, "--out", str(out), "--registry", str(bad)], capsys)
    # a bad option, like the other output checks before any work (exit 2)
    assert code == 2 and f"hase: error: --registry {bad}: cannot open model registry" in err
    assert not out.exists() and no_training == []
    # a database whose predictor_models table is something else is refused the same way
    import sqlite3

    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as con:
        con.execute("create table predictor_models (version integer, model text)")
    con.close()
    with pytest.raises(StoreError, match="lacks column"):
        ModelRegistry.check(other)


def test_save_model_and_write_csv_raise_typed_errors_and_leave_no_tmp(tmp_path: Path, small: str) -> None:
    rows: list[Measurement] = read_csv(small)[:3]
    pred = load_predictor()
    # the target is a folder: the staged file cannot replace it
    target = tmp_path / "taken"
    target.mkdir()
    with pytest.raises(PredictorError, match=str(target)):
        save_model(pred, target)
    with pytest.raises(DataError, match=str(target)):
        write_csv(rows, target)
    assert [p.name for p in tmp_path.iterdir()] == ["taken"]  # no .tmp left
    # a folder that does not exist
    with pytest.raises(DataError, match="nodir"):
        write_csv(rows, tmp_path / "nodir" / "rows.csv")
    assert write_csv(rows, tmp_path / "rows.csv") == 3 and len(read_csv(tmp_path / "rows.csv")) == 3


def test_a_failing_registry_leaves_the_model_file_as_it_was(
    tmp_path: Path, small: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    import slurm_hase.predict.train as train_mod

    real_train = train_mod.train
    monkeypatch.setattr(train_mod, "train", lambda rows, **k: real_train(rows, rounds=20, with_p90=False, **k))

    def broken_save(self: ModelRegistry, *_a: Any, **_k: Any) -> int:
        raise StoreError("disk full (simulated)")

    monkeypatch.setattr(ModelRegistry, "save", broken_save)
    out = tmp_path / "m.json"
    out.write_text("the old model")
    code, _o, err = _main(["model", "train", "--data", small, "--out", str(out),
                           "--registry", str(tmp_path / "reg.sqlite")], capsys)
    assert code == 1 and "disk full (simulated)" in err
    assert out.read_text() == "the old model"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json", "reg.sqlite"]  # no m.json.tmp


def test_evaluate_baseline_goes_with_split_only(
    small: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    code, _o, err = _main(["model", "evaluate", "--model", "shipped", "--baseline", "--data", small], capsys)
    assert code == 2 and "--baseline needs --split" in err
    code, out, _e = _main(["model", "evaluate", "--model", "shipped", "--no-baseline", "--data", small,
                           "--json"], capsys)
    assert code == 0 and '"model"' in out and "baseline" not in out
    # --split keeps the baseline on by default, off with --no-baseline
    import slurm_hase.predict.evaluate as ev

    seen: list[bool] = []

    def fake_cv(rows: list[Measurement], split: str, *, baseline: bool, **_k: Any) -> dict[str, Any]:
        seen.append(baseline)
        return {}

    monkeypatch.setattr(ev, "cross_validate", fake_cv)
    for extra in ([], ["--baseline"], ["--no-baseline"]):
        code, _o, err = _main(["model", "evaluate", "--split", "random", "--data", small, *extra], capsys)
        assert code == 0, err
    assert seen == [True, True, False]
