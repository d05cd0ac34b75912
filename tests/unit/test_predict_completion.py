"""The collaborative-filtering completion: fitting, blending into the P50, the model file."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from slurm_hase.errors import PredictorError
from slurm_hase.predict import features as F
from slurm_hase.predict.api import Predictor
from slurm_hase.predict.blend import BLEND_GRID, CF_RANKS, cf_keys, complete
from slurm_hase.predict.catalog import resolve_gpu
from slurm_hase.predict.completion import MAX_FACTOR, Completion, column_key, corunner_key, fit
from slurm_hase.predict.dataset import Measurement, read_csv
from slurm_hase.predict.descriptor import WorkloadDescriptor
from slurm_hase.predict.evaluate import predict_rows
from slurm_hase.predict.fitting import matrix
from slurm_hase.predict.forest import predict_one
from slurm_hase.predict.keys import model_key
from slurm_hase.predict.modelfile import (
    MODEL_VERSION,
    load_predictor,
    predictor_from_json,
    save_model,
)
from slurm_hase.predict.train import train


@pytest.fixture(scope="module")
def rows(fixtures_dir: Path) -> list[Measurement]:
    return read_csv(fixtures_dir / "predict" / "measurements_small.csv")


@pytest.fixture(scope="module")
def plain(rows: list[Measurement]) -> Predictor:
    return train(rows, rounds=40, completed=False)


def _low_rank(seed: int = 0) -> tuple[dict[tuple[str, str], float], list[tuple[str, str]]]:
    """A 30 x 12 matrix mu + a + b + U.V (rank 2) and 12 entries to hold out."""
    rng = random.Random(seed)
    a = [rng.gauss(0, 1) for _ in range(30)]
    b = [rng.gauss(0, 1) for _ in range(12)]
    u = [[rng.gauss(0, 1) for _ in range(2)] for _ in range(30)]
    v = [[rng.gauss(0, 1) for _ in range(2)] for _ in range(12)]
    full = {(f"w{i}", f"c{j}"): 0.5 + a[i] + b[j] + u[i][0] * v[j][0] + u[i][1] * v[j][1]
            for i in range(30) for j in range(12)}
    held = rng.sample(sorted(full), 12)
    return full, held


def test_completion_recovers_held_out_entries_of_a_low_rank_matrix() -> None:
    full, held = _low_rank()
    train_keys = [k for k in full if k not in held]
    ys = [full[k] for k in train_keys]

    def worst(rank: int) -> float:
        comp = fit([w for w, _c in train_keys], [c for _w, c in train_keys], ys, rank=rank, ridge=1e-3, iters=200)
        got = [comp.score(w, c) for w, c in held]
        assert all(g is not None for g in got)
        return max(abs(g - full[k]) for g, k in zip(got, held, strict=True) if g is not None)

    assert worst(2) < 0.05  # the interaction is recovered
    assert worst(0) > 0.5  # biases alone cannot


def test_completion_needs_support() -> None:
    cells = [(w, c) for w in "acd" for c in "xyz"] + [("b", "x"), ("a", "t")]
    comp = fit([w for w, _c in cells], [c for _w, c in cells], [float(i) for i in range(len(cells))],
               rank=1, ridge=0.1)
    assert comp.score("a", "y") is not None
    assert comp.score("b", "x") is None  # one entry: fewer than rank + 2
    assert comp.score("a", "t") is None  # the same for a column
    assert comp.score("a", "nowhere") is None and comp.score("nobody", "x") is None
    assert comp.weight("pair-few", "a") == comp.weight("pair", "a") == 0.0


def test_fit_is_deterministic() -> None:
    full, _held = _low_rank(1)
    keys = sorted(full)
    args = ([w for w, _c in keys], [c for _w, c in keys], [full[k] for k in keys])
    assert fit(*args, rank=2, ridge=0.3) == fit(*args, rank=2, ridge=0.3)


def _clip(gap: float) -> float:
    return min(max(gap, -math.log(MAX_FACTOR)), math.log(MAX_FACTOR))


def _trees(model: Predictor, desc: WorkloadDescriptor, gpu: str) -> float:
    x, _base = F.row(desc, resolve_gpu(gpu))
    return predict_one(model._trees["p50"], x)


def _with_completion(plain: Predictor, rows: list[Measurement], weights: dict[str, float]) -> Predictor:
    """``plain`` with a completion of ``rows``; a level's weight also serves its sparse rows."""
    weights = {**weights, **{f"{k}-sparse": w for k, w in weights.items()}}
    _x, _b, y = matrix(rows)
    wk, ck = cf_keys(rows)
    comp = fit(wk, ck, list(y), rank=2, ridge=0.3)
    assert comp.rows and comp.cols
    return Predictor(boosters=plain.boosters, meta=plain.meta, known=plain.known, factors=plain.factors,
                     completion=comp.with_weights(weights))


def test_blend_moves_the_p50_towards_the_completion(rows: list[Measurement], plain: Predictor) -> None:
    model = _with_completion(plain, rows, {"seen": 0.6, "pair": 1.0})
    assert model.completion is not None
    wk, ck = cf_keys(rows)
    checked = 0
    for m, w, c in zip(rows, wk, ck, strict=True):
        cf = model.completion.score(w, c)
        if cf is None:
            continue
        x, base = F.row(m.desc, resolve_gpu(m.gpu))
        s50 = predict_one(plain._trees["p50"], x)
        want = math.exp(base + s50 + 0.6 * _clip(cf - s50))  # the model was measured on this GPU: "seen"
        got = model.predict(m.desc, [m.gpu])[m.gpu]
        assert got.iter_time_p50 == pytest.approx(want, rel=1e-9)
        assert got.iter_time_p90 >= got.iter_time_p50
        assert model.predict_many([m.desc], [m.gpu])[0, 0] == pytest.approx(want, rel=1e-9)
        assert predict_rows(model, [m])[0] == pytest.approx(want, rel=1e-9)
        checked += 1
        if checked == 10:
            break
    assert checked == 10
    # no weight: the trees alone
    off = _with_completion(plain, rows, {})
    d = rows[0].desc
    assert off.predict(d, ["k80"])["k80"].iter_time_p50 == pytest.approx(
        plain.predict(d, ["k80"])["k80"].iter_time_p50, rel=1e-12)
    # unknown workloads are untouched
    anon = WorkloadDescriptor(gflops_per_iter=123.0, params_m=10.0, batch_size=8)
    assert model.cf_row(anon, model_key(anon)) is None
    assert model.predict_many([anon], ["k80", "v100"]) == pytest.approx(plain.predict_many([anon], ["k80", "v100"]))


def test_predict_many_matches_predict_with_completion(rows: list[Measurement], plain: Predictor) -> None:
    model = _with_completion(plain, rows, {"seen": 0.5, "pair": 0.8})
    descs = [m.desc for m in rows[::9]]
    gpus = ["k80", "p100", "v100", "t4", "a100"]
    arr = model.predict_many(descs, gpus)
    assert arr != pytest.approx(plain.predict_many(descs, gpus))
    for i, d in enumerate(descs):
        one = model.predict(d, gpus)
        assert list(arr[i]) == pytest.approx([one[g].iter_time_p50 for g in gpus], rel=1e-9)


def test_mps_slowdown_uses_one_estimator(rows: list[Measurement], plain: Predictor) -> None:
    model = _with_completion(plain, rows, {"seen": 1.0, "pair": 1.0})
    assert model.completion is not None
    comp = model.completion

    def both(m: Measurement) -> tuple[str, float, float] | None:
        if len(m.desc.corunner_gflops) != 1 or m.gpu != "k80":
            return None
        d = m.desc.with_corunners(())
        wkey = model.cf_row(d, model_key(d))
        alone = comp.score(wkey, column_key("k80", "")) if wkey else None
        shared = comp.score(wkey, column_key("k80", corunner_key(m.desc.corunner_gflops))) if wkey else None
        return None if alone is None or shared is None else (m.desc.model or "", alone, shared)

    co = next(m for m in rows if both(m) is not None)
    found = both(co)
    assert found is not None
    _name, alone, shared = found
    desc = co.desc.with_corunners(())
    s_alone, s_shared = _trees(plain, desc, "k80"), _trees(plain, co.desc, "k80")
    want = math.exp(s_shared + _clip(shared - s_shared) - s_alone - _clip(alone - s_alone))
    runner = WorkloadDescriptor(gflops_per_iter=co.desc.corunner_gflops[0], params_m=10.0, batch_size=1)
    assert model.mps_slowdown(desc, [runner], "k80") == pytest.approx(max(1.0, want), rel=1e-9)


@pytest.mark.parametrize(("mu", "factor"), [(30.0, MAX_FACTOR), (-30.0, 1.0 / MAX_FACTOR)])
def test_completion_moves_the_p50_at_most_max_factor(
    rows: list[Measurement], plain: Predictor, mu: float, factor: float
) -> None:
    m = rows[0]
    wk, ck = cf_keys([m])
    comp = Completion(0, mu, {wk[0]: [0.0]}, {ck[0]: [0.0]}, {wk[0]: 50}, {"seen": 1.0})
    model = Predictor(boosters=plain.boosters, meta=plain.meta, known=plain.known, completion=comp)
    got = model.predict(m.desc, [m.gpu])[m.gpu].iter_time_p50
    assert got == pytest.approx(factor * plain.predict(m.desc, [m.gpu])[m.gpu].iter_time_p50, rel=1e-9)
    assert model.predict_many([m.desc], [m.gpu])[0, 0] == pytest.approx(got, rel=1e-9)


def test_complete_chooses_rank_and_weights_on_inner_folds(rows: list[Measurement]) -> None:
    x, _b, y = matrix(rows)
    for comp in complete(rows, x, y, rounds=20):  # single-GPU and pooled (multi-GPU) completions
        if comp is not None:
            assert comp.rank in CF_RANKS
            assert all(w in BLEND_GRID for w in comp.weights.values())
    plain = train(rows, rounds=20, completed=False, with_p90=False)
    assert plain.completion is None and plain.completion_multi is None


def test_model_file_round_trip_and_validation(tmp_path: Path, rows: list[Measurement], plain: Predictor) -> None:
    model = _with_completion(plain, rows, {"seen": 0.3, "pair": 0.9})
    f = tmp_path / "m.json"
    save_model(model, f)
    doc = json.loads(f.read_text())
    assert doc["version"] == MODEL_VERSION == 3
    back = load_predictor(f)
    assert back.completion == model.completion
    d = rows[5].desc
    assert back.predict(d, ["k80"])["k80"] == model.predict(d, ["k80"])["k80"]
    good = doc["completion"]
    first_row = next(iter(good["rows"]))
    bads = [
        "garbage", {**good, "rank": -1}, {**good, "rank": 1.5}, {**good, "mu": "x"},
        {**good, "weights": {"seen": 1.5}}, {**good, "weights": {"gpu": 0.5}},
        {**good, "rows": {first_row: [0.1]}}, {**good, "rows": {first_row: [0.1, "x", 0.2]}},
        {**good, "cols": None}, {**good, "rows": {first_row: [float("nan"), 0.0, 0.0]}},
    ]
    for bad in bads:
        doc["completion"] = bad
        f.write_text(json.dumps(doc))
        with pytest.raises(PredictorError, match="m.json"):
            load_predictor(f)
    # version 2 files (no completion section) still load: the trees alone
    del doc["completion"]
    doc["version"] = 2
    old = predictor_from_json(json.dumps(doc), "m.json")
    assert old.completion is None
    assert old.predict(d, ["k80"])["k80"].iter_time_p50 == pytest.approx(
        plain.predict(d, ["k80"])["k80"].iter_time_p50, rel=1e-12)


def test_shipped_model_has_a_completion() -> None:
    pred = load_predictor()
    assert pred.completion is not None and pred.completion.rank in CF_RANKS
    d = WorkloadDescriptor(model="resnet50", batch_size=64)
    assert pred.cf_row(d, model_key(d)) is not None
