"""Knowledge levels, the per-level P50 factors and the unseen-model booster."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from slurm_hase.errors import PredictorError
from slurm_hase.predict.api import Predictor
from slurm_hase.predict.catalog import gpu_keys
from slurm_hase.predict.dataset import Measurement, make, read_csv
from slurm_hase.predict.descriptor import WorkloadDescriptor
from slurm_hase.predict.evaluate import mape, predict_rows
from slurm_hase.predict.fitting import known_gpus, levels, matrix
from slurm_hase.predict.keys import LEVELS, knowledge_level, model_key
from slurm_hase.predict.modelfile import load_predictor, predictor_from_json, save_model
from slurm_hase.predict.train import CALIBRATED_LEVELS, FACTOR_RANGE, calibrate, mape_factor, train


@pytest.fixture(scope="module")
def rows(fixtures_dir: Path) -> list[Measurement]:
    return read_csv(fixtures_dir / "predict" / "measurements_small.csv")


@pytest.fixture(scope="module")
def model(rows: list[Measurement]) -> Predictor:
    return train(rows, rounds=40)


def test_mape_factor_is_the_mape_minimiser() -> None:
    rng = random.Random(3)
    true = [rng.uniform(0.1, 2.0) for _ in range(200)]
    pred = [t * rng.lognormvariate(0.1, 0.3) for t in true]
    c = mape_factor(pred, true)
    best = mape([c * p for p in pred], true)
    for other in (c * 0.9, c * 1.1, 1.0):
        assert best <= mape([other * p for p in pred], true)
    assert mape_factor([2.0, 4.0, 6.0], [1.0, 2.0, 3.0]) == pytest.approx(0.5)
    assert mape_factor([1.0, 1.0], [1000.0, 1000.0]) == FACTOR_RANGE[1]  # clipped
    assert mape_factor([1000.0, 1000.0], [1.0, 1.0]) == FACTOR_RANGE[0]  # never near zero


def test_knowledge_levels() -> None:
    known = {"resnet50": ["a100", "k80", "t4", "v100"], "ncf": ["t4"]}
    gpus = {"a100", "k80", "t4", "v100", "h100"}
    assert knowledge_level(known, gpus, "resnet50", "t4") == "seen"
    assert knowledge_level(known, gpus, "resnet50", "h100") == "pair"
    assert knowledge_level(known, gpus, "ncf", "v100") == "pair-few"
    assert knowledge_level(known, gpus, "ncf", "l4") == "gpu"
    assert knowledge_level(known, gpus, "gpt-j", "t4") == "model"


def test_model_key_resolves_spellings() -> None:
    assert model_key(WorkloadDescriptor(model="ResNet-50")) == model_key(WorkloadDescriptor(model="resnet50"))
    assert model_key(WorkloadDescriptor(model="my-own-net", gflops_per_iter=5.0)) == "my-own-net"
    anon = make("v100", None, 123.0, None, 8, "fp32", "train", 1, (), 0.1)
    assert model_key(anon.desc) == anon.model  # same tag as the measurement table uses


def test_levels_relative_to_training_rows(rows: list[Measurement]) -> None:
    tr = [m for m in rows if m.gpu != "k80" and m.model != "lstm-lm"]
    lv = levels(tr, rows)
    for m, level in zip(rows, lv, strict=True):
        if m.model == "lstm-lm" and not any(model_key(t.desc) == model_key(m.desc) for t in tr):
            assert level == "model"
        elif m.gpu == "k80":
            assert level == "gpu"
    assert set(known_gpus(rows)) == {model_key(m.desc) for m in rows}


def test_calibrate_gives_every_level_in_range(rows: list[Measurement]) -> None:
    x, _base, y = matrix(rows)
    f = calibrate(rows, x, y, rounds=20)
    assert set(f) == set(LEVELS)
    assert all(FACTOR_RANGE[0] <= v <= FACTOR_RANGE[1] for v in f.values())
    assert all(f[lv] == 1.0 for lv in LEVELS if lv not in CALIBRATED_LEVELS)
    every = calibrate(rows, x, y, rounds=20, fitted=LEVELS)
    assert all(FACTOR_RANGE[0] <= v <= FACTOR_RANGE[1] for v in every.values())
    assert any(every[lv] != 1.0 for lv in LEVELS if lv not in CALIBRATED_LEVELS)
    model_only = calibrate(rows, x, y, rounds=20, fitted=("model",))
    assert model_only["model"] == every["model"]
    assert all(model_only[lv] == 1.0 for lv in LEVELS if lv != "model")


def test_factor_scales_p50_everywhere(model: Predictor) -> None:
    raw = Predictor(boosters=model.boosters, meta=model.meta, known=model.known)
    scaled = Predictor(boosters=model.boosters, meta=model.meta, known=model.known,
                       factors={lv: 0.5 + 0.1 * i for i, lv in enumerate(LEVELS)})
    unseen = WorkloadDescriptor(gflops_per_iter=777.0, params_m=20.0, batch_size=32)
    known_model = WorkloadDescriptor(model="resnet18-cifar", batch_size=32)
    gpus = ["k80", "p100", "h100", "rtx2080ti"]
    for d in (unseen, known_model):
        a, b = raw.predict(d, gpus), scaled.predict(d, gpus)
        for g in gpus:
            f = scaled.factor(model_key(d), g)
            assert b[g].iter_time_p50 == pytest.approx(f * a[g].iter_time_p50, rel=1e-12)
            assert b[g].iter_time_p90 >= b[g].iter_time_p50
    assert scaled.factor(model_key(unseen), "k80") == pytest.approx(0.5 + 0.1 * LEVELS.index("model"))
    arr = scaled.predict_many([unseen, known_model, unseen], gpus)
    for i, d in enumerate((unseen, known_model, unseen)):
        one = scaled.predict(d, gpus)
        assert list(arr[i]) == pytest.approx([one[g].iter_time_p50 for g in gpus], rel=1e-9)


def test_predict_rows_uses_the_factor(rows: list[Measurement], model: Predictor) -> None:
    raw = Predictor(boosters=model.boosters, meta=model.meta, known=model.known)
    half = Predictor(boosters=model.boosters, meta=model.meta, known=model.known,
                     factors=dict.fromkeys(LEVELS, 0.5))
    assert predict_rows(half, rows[:20]) == pytest.approx([0.5 * p for p in predict_rows(raw, rows[:20])])


def test_calibration_round_trip_and_validation(tmp_path: Path, model: Predictor) -> None:
    f = tmp_path / "m.json"
    save_model(model, f)
    back = load_predictor(f)
    assert back.factors == model.factors and back.known == model.known
    doc = json.loads(f.read_text())
    for bad in ({"factors": {"seen": -1.0}, "known": {}}, {"factors": {"seen": "x"}, "known": {}},
                {"factors": {"nonsense": 0.9}, "known": {}}, {"factors": {}, "known": {"resnet50": "t4"}},
                "garbage"):
        doc["calibration"] = bad
        with pytest.raises(PredictorError):
            predictor_from_json(json.dumps(doc), "m.json")
    del doc["calibration"]  # files written before calibration still load, unscaled
    old = predictor_from_json(json.dumps(doc), "m.json")
    assert old.factor("resnet50", "t4") == 1.0


def test_shipped_model_is_calibrated() -> None:
    pred = load_predictor()
    assert set(pred.factors) == set(LEVELS) and "resnet50" in pred.known and "p50_unseen" in pred.boosters
    assert pred.level("resnet50", "t4") == "seen" and pred.level("no-such-net", "t4") == "model"
    assert len(gpu_keys()) > len(pred.known["resnet50"])


def test_unseen_models_use_the_regularised_booster(model: Predictor) -> None:
    import math

    from slurm_hase.predict import features as F
    from slurm_hase.predict.catalog import resolve_gpu
    from slurm_hase.predict.forest import predict_one

    assert "p50_unseen" in model.boosters
    plain = Predictor(boosters={q: b for q, b in model.boosters.items() if q != "p50_unseen"},
                      known=model.known, factors=model.factors)
    d = WorkloadDescriptor(gflops_per_iter=321.0, params_m=40.0, batch_size=16)
    assert model.unseen(model_key(d)) and not plain.unseen(model_key(d))
    assert not model.unseen(model_key(WorkloadDescriptor(model="resnet18-cifar")))
    spec = resolve_gpu("v100")
    x, c = F.row(d, spec)
    got = model.predict(d, ["v100"])["v100"].iter_time_p50
    want = model.factor(model_key(d), "v100") * math.exp(c + predict_one(model._trees["p50_unseen"], x))
    assert got == pytest.approx(want, rel=1e-12)
    assert got != pytest.approx(plain.predict(d, ["v100"])["v100"].iter_time_p50, rel=1e-6)
    assert model.predict_many([d], ["v100"])[0, 0] == pytest.approx(got, rel=1e-9)
    with pytest.raises(PredictorError, match="unknown booster"):
        Predictor(boosters={**model.boosters, "p77": model.boosters["p50"]})


def test_p90_stays_above_a_calibrated_p50_in_single_and_bulk_predictions(model: Predictor) -> None:
    # a calibration factor > 1 lifts the P50 above the trees' P90: both paths must then report
    # the P50 as the P90 (a quantile is never below the median), and agree with each other
    scaled = Predictor(boosters=model.boosters, meta=model.meta, known=model.known,
                       factors={lv: 1.5 + 0.5 * i for i, lv in enumerate(LEVELS)})
    descs = [WorkloadDescriptor(gflops_per_iter=777.0, params_m=20.0, batch_size=32),
             WorkloadDescriptor(model="resnet18-cifar", batch_size=32),
             WorkloadDescriptor(model="resnet18-cifar", batch_size=32, corunner_gflops=(50.0,))]
    gpus = ["k80", "p100", "v100", "h100", "rtx2080ti"]
    p50, p90 = scaled.predict_many_q(descs, gpus, "p50"), scaled.predict_many_q(descs, gpus, "p90")
    assert (p90 >= p50).all() and (p90 == p50).any()  # the clamp was exercised
    for i, d in enumerate(descs):
        single = scaled.predict(d, gpus)
        assert list(p90[i]) == pytest.approx([single[g].iter_time_p90 for g in gpus], rel=1e-9)
        assert all(single[g].iter_time_p90 >= single[g].iter_time_p50 for g in gpus)
