"""The pooled completion: multi-GPU jobs share a row with the same workload's single-GPU runs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from slurm_hase.errors import PredictorError
from slurm_hase.predict import features as F
from slurm_hase.predict.api import Predictor
from slurm_hase.predict.blend import cf_keys
from slurm_hase.predict.catalog import resolve_gpu
from slurm_hase.predict.completion import (
    MAX_FACTOR,
    column_key,
    context_key,
    fit,
    is_multi,
    pooled_key,
)
from slurm_hase.predict.dataset import Measurement, read_csv
from slurm_hase.predict.evaluate import predict_rows
from slurm_hase.predict.fitting import matrix
from slurm_hase.predict.forest import predict_one
from slurm_hase.predict.keys import model_key
from slurm_hase.predict.modelfile import load_predictor, predictor_from_json, save_model
from slurm_hase.predict.train import train


@pytest.fixture(scope="module")
def rows(fixtures_dir: Path) -> list[Measurement]:
    return read_csv(fixtures_dir / "predict" / "measurements_small.csv")


@pytest.fixture(scope="module")
def model(rows: list[Measurement]) -> Predictor:
    """Trees without completions, plus a pooled completion of every row at full weight."""
    plain = train(rows, rounds=40, completed=False)
    _x, _b, y = matrix(rows)
    wk, ck = cf_keys(rows, pooled=True)
    comp = fit(wk, ck, list(y), rank=2, ridge=0.3).with_weights({"seen": 1.0, "seen-sparse": 1.0})
    return Predictor(boosters=plain.boosters, meta=plain.meta, known=plain.known, completion_multi=comp)


def test_keys() -> None:
    assert context_key((), 1) == "" and context_key((), 4) == "#4"
    assert context_key((2.0, 1.0), 1) == "1;2" and context_key((1.0,), 2) == "1#2"
    assert is_multi("#8") and not is_multi("") and not is_multi("1;2")


def test_pooled_rows_join_gpu_counts(rows: list[Measurement]) -> None:
    wk, ck = cf_keys(rows, pooled=True)
    multi = [i for i, m in enumerate(rows) if m.desc.num_gpus > 1]
    single = [i for i, m in enumerate(rows) if m.desc.num_gpus == 1]
    assert multi and single
    # a multi-GPU run sits in the same row as the single-GPU runs of its workload, its column carries n
    assert {wk[i] for i in multi} <= {wk[i] for i in single}
    assert all(ck[i].endswith(f"#{rows[i].desc.num_gpus}") for i in multi)
    assert not any(is_multi(ck[i]) for i in single)


def test_multi_gpu_queries_use_the_pooled_completion(rows: list[Measurement], model: Predictor) -> None:
    comp = model.completion_multi
    assert comp is not None and model.completion is None
    checked = 0
    for m in rows:
        mk = model_key(m.desc)
        wkey = model.cf_row(m.desc, mk)
        if m.desc.num_gpus == 1:
            assert wkey is None  # single-GPU jobs: the (absent) per-count completion
            continue
        assert wkey == pooled_key(mk, m.desc, m.desc.batch_size or 0)
        y = comp.score(wkey, column_key(m.gpu, context_key(m.desc.corunner_gflops, m.desc.num_gpus)))
        if y is None:
            continue
        x, base = F.row(m.desc, resolve_gpu(m.gpu))
        s50 = predict_one(model._trees["p50"], x)
        want = math.exp(base + s50 + min(max(y - s50, -math.log(MAX_FACTOR)), math.log(MAX_FACTOR)))
        assert model.predict(m.desc, [m.gpu])[m.gpu].iter_time_p50 == pytest.approx(want, rel=1e-9)
        assert model.predict_many([m.desc], [m.gpu])[0, 0] == pytest.approx(want, rel=1e-9)
        assert predict_rows(model, [m])[0] == pytest.approx(want, rel=1e-9)
        checked += 1
    assert checked >= 10


def test_model_file_keeps_the_pooled_completion(tmp_path: Path, rows: list[Measurement], model: Predictor) -> None:
    f = tmp_path / "m.json"
    save_model(model, f)
    back = load_predictor(f)
    assert back.completion_multi == model.completion_multi
    d = next(m.desc for m in rows if m.desc.num_gpus > 1)
    assert back.predict(d, ["v100"])["v100"] == model.predict(d, ["v100"])["v100"]
    doc = json.loads(f.read_text())
    doc["completion_multi"] = {**doc["completion_multi"], "rank": -1}
    with pytest.raises(PredictorError, match="m.json"):
        predictor_from_json(json.dumps(doc), "m.json")
    del doc["completion_multi"]  # files without the section (before it existed) load: no pooled completion
    assert predictor_from_json(json.dumps(doc), "m.json").completion_multi is None


def test_shipped_model_completes_multi_gpu_jobs() -> None:
    from slurm_hase.predict.descriptor import WorkloadDescriptor

    pred = load_predictor()
    d = WorkloadDescriptor(model="resnet50", batch_size=64, num_gpus=4)
    assert pred.completion_multi is not None
    assert pred.cf_row(d, model_key(d)) is not None
