"""Training, cross-validation, the registry, refit and the CLI on small real data."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_hase.cli.model_cmd import model as model_group
from slurm_hase.errors import DataError, PredictorError, StoreError
from slurm_hase.predict import features as F
from slurm_hase.predict.catalog import resolve_gpu
from slurm_hase.predict.dataset import Measurement, read_csv
from slurm_hase.predict.descriptor import WorkloadDescriptor
from slurm_hase.predict.evaluate import cross_validate, folds, mape, predict_rows
from slurm_hase.predict.fitting import matrix
from slurm_hase.predict.forest import predict_one
from slurm_hase.predict.modelfile import (
    load_predictor,
    model_to_json,
    predictor_from_json,
    save_model,
)
from slurm_hase.predict.models import fill
from slurm_hase.predict.refit import harvest, harvest_backend, refit
from slurm_hase.predict.registry import ModelRegistry
from slurm_hase.predict.train import train
from slurm_hase.slurm.types import AccountingRecord, JobState


@pytest.fixture(scope="module")
def rows(fixtures_dir: Path) -> list[Measurement]:
    return read_csv(fixtures_dir / "predict" / "measurements_small.csv")


@pytest.fixture(scope="module")
def small_model(rows: list[Measurement]):  # type: ignore[no-untyped-def]
    return train(rows, rounds=150)


def test_pure_python_walk_equals_lightgbm(rows: list[Measurement], small_model) -> None:  # type: ignore[no-untyped-def]
    x, _base, _y = matrix(rows[:40])
    lgb_scores = small_model.raw_scores(x)
    ours = [predict_one(small_model._trees["p50"], list(r)) for r in x]
    assert ours == pytest.approx(list(lgb_scores), rel=1e-9, abs=1e-12)


def test_training_fits_the_data(rows: list[Measurement], small_model) -> None:  # type: ignore[no-untyped-def]
    assert mape(predict_rows(small_model, rows), [m.iter_time_s for m in rows]) < 15.0
    assert small_model.meta["rows"] == len(rows)


def test_save_load_round_trip(tmp_path: Path, small_model) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / "m.json"
    save_model(small_model, f)
    d = WorkloadDescriptor(model="resnet50", batch_size=32)
    assert load_predictor(f).predict(d, ["p100"]) == small_model.predict(d, ["p100"])


def test_base_is_the_geometric_mean_of_the_compute_and_bandwidth_rooflines() -> None:
    spec = resolve_gpu("v100")
    desc = WorkloadDescriptor(model="resnet50", batch_size=64)
    gflops = 64 * fill(desc).gflops / fill(desc).batch_size
    compute_s = gflops / (spec.peak_tflops("fp32") * 1e3)
    bandwidth_s = gflops / (spec.mem_bw_gbs * F.FLOP_PER_BYTE)  # GFLOPs / (GFLOP/s)
    _x, base = F.row(desc, spec, 0.5)
    assert math.exp(base) == pytest.approx(math.sqrt(compute_s * bandwidth_s), rel=1e-9)
    assert math.exp(F.row(desc, spec, 1.0)[1]) == pytest.approx(compute_s, rel=1e-9)
    x, bulk = F.matrix_of([(tuple(F.job_vector(desc)), "fp32")], [spec], 0.5)
    assert float(bulk[0]) == pytest.approx(base, rel=1e-12)


def test_a_model_file_without_compute_weight_keeps_the_compute_roofline(
        tmp_path: Path, small_model) -> None:  # type: ignore[no-untyped-def]
    assert small_model.meta["compute_weight"] == F.COMPUTE_WEIGHT == small_model.compute_weight
    doc = json.loads(model_to_json(small_model))
    del doc["meta"]["compute_weight"]  # what every model file before it was
    old = predictor_from_json(json.dumps(doc))
    assert old.compute_weight == 1.0
    d = WorkloadDescriptor(model="resnet50", batch_size=32)
    for gpu in ("p100", "a100"):
        spec = resolve_gpu(gpu)
        job, vec = F.job_vector(d), F.gpu_vector(spec, "fp32")
        compute = F.cross(job, vec, "fp32")[0]
        shift = F.base_of(compute, vec[0], vec[1], 0.5) - compute
        new_p50 = small_model.predict(d, [gpu])[gpu].iter_time_p50
        old_p50 = old.predict(d, [gpu])[gpu].iter_time_p50
        assert old_p50 == pytest.approx(new_p50 * math.exp(-shift), rel=1e-9)
        # the bulk path (numpy) reads the same weight as the single one (pure Python)
        assert float(old.predict_many([d], [gpu])[0, 0]) == pytest.approx(old_p50, rel=1e-6)
        assert float(small_model.predict_many([d], [gpu])[0, 0]) == pytest.approx(new_p50, rel=1e-6)
    for bad in (1.5, -0.1, "half", True, float("nan")):
        doc["meta"]["compute_weight"] = bad
        with pytest.raises(PredictorError, match="compute_weight"):
            predictor_from_json(json.dumps(doc))


def test_folds_and_split_errors(rows: list[Measurement]) -> None:
    gpu_folds = folds(rows, "leave-one-gpu-out")
    assert len(gpu_folds) == len({m.gpu for m in rows})
    assert sorted(i for f in folds(rows, "random") for i in f) == list(range(len(rows)))
    with pytest.raises(DataError):
        folds(rows, "leave-one-user-out")
    with pytest.raises(DataError):
        train(rows[:5])


def test_cross_validate_reports_baseline(rows: list[Measurement]) -> None:
    seen: list[tuple[int, int]] = []
    res = cross_validate(rows, "random", rounds=40, on_fold=lambda done, total: seen.append((done, total)))
    assert seen == [(1, 5), (2, 5), (3, 5), (4, 5), (5, 5)]  # progress after every fold
    assert set(res) == {"ours", "hase_baseline"}
    assert res["ours"].n == len(rows) and res["ours"].mape_colocated is not None
    assert res["ours"].mape < res["hase_baseline"].mape


def test_registry_versions(tmp_path: Path, small_model) -> None:  # type: ignore[no-untyped-def]
    reg = ModelRegistry(tmp_path / "state.db")
    assert reg.save(small_model, note="first") == 1
    assert reg.save(small_model, note="second", metrics={"mape": 5.0}) == 2
    vs = reg.versions()
    assert [v.version for v in vs] == [1, 2] and vs[1].metrics == {"mape": 5.0}
    assert reg.load().meta == small_model.meta
    with pytest.raises(StoreError):
        reg.load(7)
    bad = tmp_path / "garbage.db"
    bad.write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(StoreError):
        ModelRegistry(bad)


class FakeBackend:
    def __init__(self, records: list[AccountingRecord]) -> None:
        self.records = records

    def accounting(self, *, since: str = "now-1day", until: str = "now",
                   job_ids: tuple[str, ...] = ()) -> list[AccountingRecord]:
        return self.records


def _records(rows: list[Measurement]) -> list[AccountingRecord]:
    """Real measured iteration times replayed as finished jobs (elapsed = time x iterations)."""
    out = []
    for i, m in enumerate(rows):
        desc = WorkloadDescriptor(model=m.desc.model, gflops_per_iter=m.desc.gflops_per_iter,
                                  batch_size=m.desc.batch_size, num_gpus=m.desc.num_gpus, iterations=2000)
        out.append(AccountingRecord(job_id=str(i), name="j", account="a", user="u", state=JobState.COMPLETED,
                                    elapsed_s=round(m.iter_time_s * 2000), alloc_gpus={m.gpu: m.desc.num_gpus},
                                    comment=desc.to_comment()))
    return out


def test_harvest_skips_with_reasons(rows: list[Measurement]) -> None:
    recs = _records(rows[:3])
    recs.append(AccountingRecord(job_id="x", name="j", account="a", user="u", state=JobState.FAILED))
    recs.append(AccountingRecord(job_id="y", name="j", account="a", user="u", state=JobState.COMPLETED,
                                 elapsed_s=10, comment="plain comment"))
    recs.append(AccountingRecord(job_id="z", name="j", account="a", user="u", state=JobState.COMPLETED,
                                 elapsed_s=10, comment='{"hase":1,"bs":', alloc_gpus={"v100": 1}))
    got = harvest_backend(FakeBackend(recs))
    assert len(got.rows) == 3
    assert got.skipped == {"not completed": 1, "no descriptor": 1, "bad descriptor": 1}
    assert got.rows[0].iter_time_s == pytest.approx(rows[0].iter_time_s, rel=0.01)


def test_refit_lowers_error_on_following_jobs(rows: list[Measurement]) -> None:
    # base knows only K80/P100 exclusive runs; the site then runs V100 jobs
    iso = [m for m in rows if not m.desc.corunner_gflops and m.gpu in ("k80", "p100", "v100")]
    base = [m for m in iso if m.gpu != "v100"]
    v100 = [m for m in iso if m.gpu == "v100"]
    history, following = v100[::2], v100[1::2]
    before = train(base, rounds=60)
    after = refit(base, harvest(_records(history)).rows)
    true = [m.iter_time_s for m in following]
    assert mape(predict_rows(after, following), true) < mape(predict_rows(before, following), true)


def test_cli_predict_and_evaluate(tmp_path: Path, fixtures_dir: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(model_group, ["predict", "--model", "resnet50", "--batch-size", "64",
                                      "--iterations", "100", "--gpu", "a100", "--gpu", "t4"])
    assert res.exit_code == 0, res.output
    assert "a100" in res.output and "t4" in res.output
    data = str(fixtures_dir / "predict" / "measurements_small.csv")
    res = runner.invoke(model_group, ["evaluate", "--model", "shipped", "--data", data, "--json"])
    assert res.exit_code == 0, res.output
    assert '"mape"' in res.output
    res = runner.invoke(model_group, ["predict", "--model", "resnet50", "--gpu", "a1000"])
    assert res.exit_code != 0
    res = runner.invoke(model_group, ["predict", "--spec", "model=bert-base bs=16 iters=50", "--gpu", "v100", "--json"])
    assert res.exit_code == 0, res.output
    assert '"runtime_p50_s"' in res.output and '"v100"' in res.output
    res = runner.invoke(model_group, ["predict", "--spec", '{"hase":1,"model":"gpt2","bs":4}', "--gpu", "h100"])
    assert res.exit_code == 0 and "h100" in res.output
    # a spec beside workload options would silently win over them: refused, naming the options
    res = runner.invoke(model_group, ["predict", "--spec", "model=resnet50", "--batch-size", "8",
                                      "--model", "bert-large", "--gpu", "v100"])
    assert res.exit_code == 2 and "--model, --batch-size" in res.output


def test_cli_train_registry(tmp_path: Path, fixtures_dir: Path) -> None:
    data = str(fixtures_dir / "predict" / "measurements_small.csv")
    out = tmp_path / "m.json"
    db = tmp_path / "s.db"
    res = CliRunner().invoke(model_group, ["train", "--data", data, "--out", str(out), "--registry", str(db)])
    assert res.exit_code == 0, res.output
    assert "registry version 1" in res.output
    assert load_predictor(out).meta["rows"] > 300


def test_versions_and_gpus_print_json(tmp_path: Path, small_model,  # type: ignore[no-untyped-def]
                                      capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from tests.conftest import run_main

    reg = ModelRegistry(tmp_path / "state.db")
    reg.save(small_model, note="first", metrics={"mape": 5.0})
    code, out, _ = run_main(["model", "versions", "--registry", str(tmp_path / "state.db"),
                             "--json"], capsys)
    assert code == 0
    [v] = json.loads(out)
    assert v["version"] == 1 and v["note"] == "first" and v["metrics"] == {"mape": 5.0}
    code, out, _ = run_main(["model", "gpus", "--json"], capsys)
    gpus = {g["key"]: g for g in json.loads(out)}
    assert code == 0 and len(gpus) >= 20
    assert gpus["a100"]["memory_gb"] > 0 and gpus["a100"]["source"]


def test_cross_validation_says_which_fold_is_too_small(rows: list[Measurement]) -> None:
    with pytest.raises(DataError, match=r"split random, fold 1 of 5 \(3 rows held out, 9 left to "
                                        r"train on\): need at least 10 measurements"):
        cross_validate(rows[:12], "random", baseline=False)


def test_the_same_rows_in_another_order_train_the_same_model(rows: list[Measurement]) -> None:
    import numpy as np

    from slurm_hase.predict.fitting import fit_trees, weights

    some = rows[:150]
    kw = {"rounds": 20, "with_p90": False, "calibrated": False, "completed": False,
          "paired": False}
    a, b = train(some, **kw), train(list(reversed(some)), **kw)  # type: ignore[arg-type]
    assert a.boosters == b.boosters
    assert a.meta["data_sha256"] == b.meta["data_sha256"]
    # control: LightGBM itself picks rows by position (bagging), so order alone moves it
    x, _base, y = matrix(some)
    w = weights(some)
    back = np.arange(len(some))[::-1]
    assert fit_trees(x, y, w, "regression", 20) != fit_trees(x[back], y[back], w[back],
                                                             "regression", 20)
