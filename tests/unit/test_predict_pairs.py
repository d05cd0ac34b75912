"""The pair memory: keys, the fitted weight, the shift, the model file, and its effect on real data."""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_hase.errors import PredictorError
from slurm_hase.predict.catalog import DATA_DIR
from slurm_hase.predict.dataset import Measurement, read_csv
from slurm_hase.predict.descriptor import WorkloadDescriptor
from slurm_hase.predict.evaluate import predict_rows
from slurm_hase.predict.modelfile import (
    load_predictor,
    model_to_json,
    predictor_from_json,
    save_model,
)
from slurm_hase.predict.pairs import MIN_PAIRS, PairMemory, fit_pairs, mirror, pair_key, query_shift
from slurm_hase.predict.train import pair_memory, train


def test_pair_key_takes_single_gpu_jobs_with_exactly_one_other_co_runner() -> None:
    assert pair_key("v100", 53.28, (106.56,), 1) == "v100|53.28|106.56"
    assert mirror("v100|53.28|106.56") == "v100|106.56|53.28"
    assert pair_key("v100", 53.28, (), 1) is None  # exclusive
    assert pair_key("v100", 53.28, (1.0, 2.0), 1) is None  # two co-runners
    assert pair_key("v100", 53.28, (106.56,), 2) is None  # multi-GPU
    assert pair_key("v100", 53.28, (53.28,), 1) is None  # beside a copy of itself: its own mirror
    assert pair_key("v100", None, (106.56,), 1) is None


def _synthetic(slope: float, gpu: str = "v100", n: int = 40, seed: int = 0
               ) -> tuple[list[str | None], list[float | None]]:
    """Keys and residuals of n mirrored pairs where r(A|B) = slope * r(B|A) + small noise."""
    rng = random.Random(seed)
    keys: list[str | None] = []
    resid: list[float | None] = []
    for i in range(n):
        a, b = 10.0 + i, 100.0 + i
        x = rng.gauss(0, 0.3)
        keys += [pair_key(gpu, a, (b,), 1), pair_key(gpu, b, (a,), 1)]
        resid += [slope * x + rng.gauss(0, 0.01), x]
    return keys, resid


def test_fit_pairs_recovers_the_weight() -> None:
    keys, resid = _synthetic(0.5)
    mem = fit_pairs(keys, resid)
    assert mem is not None
    # least squares through the origin over both directions of each pair, r(A|B) = s r(B|A):
    # beta = 2s / (1 + s^2), symmetric in s and 1/s and never above 1
    assert mem.beta["v100"] == pytest.approx(0.8, abs=0.02)
    steep = fit_pairs(*_synthetic(3.0))
    assert steep is not None and steep.beta["v100"] == pytest.approx(0.6, abs=0.02)
    assert fit_pairs(*_synthetic(-0.8)) is None  # anti-correlated: no weight, no memory


def test_fit_pairs_needs_enough_mirrored_pairs() -> None:
    keys, resid = _synthetic(0.5, n=MIN_PAIRS // 2 - 1)  # each pair counts from both sides
    assert fit_pairs(keys, resid) is None
    keys, resid = _synthetic(0.5, n=MIN_PAIRS // 2)
    assert fit_pairs(keys, resid) is not None
    # rows without a key or a residual are ignored
    assert fit_pairs([None, "v100|1|2"], [0.1, None]) is None


def test_shift_is_beta_times_the_mirror_residual() -> None:
    mem = PairMemory({"v100": 0.5}, {"v100|106.56|53.28": 0.4, "k80|106.56|53.28": 0.4})
    assert mem.shift("v100|53.28|106.56") == pytest.approx(0.2)
    assert mem.shift("k80|53.28|106.56") == 0.0  # no weight for k80
    assert mem.shift("v100|1|2") == 0.0  # no mirror measured
    assert mem.shift(None) == 0.0
    one = WorkloadDescriptor(gflops_per_iter=53.28, corunner_gflops=(106.56,))
    assert query_shift(mem, "v100", one) == pytest.approx(0.2)
    assert query_shift(mem, "v100", replace(one, num_gpus=2)) == 0.0
    assert query_shift(None, "v100", one) == 0.0


@pytest.mark.parametrize("section, msg", [
    ({"beta": {"v100": 1.5}, "residuals": {}}, "beta of 'v100'"),
    ({"beta": {"v100": True}, "residuals": {}}, "beta of 'v100'"),
    ({"beta": {"v100": 0.5}, "residuals": {"v100|1": 0.1}}, "bad pair key"),
    ({"beta": {"v100": 0.5}, "residuals": {"v100|1|2": "x"}}, "residual of 'v100|1|2'"),
    ({"beta": {"v100": 0.5}}, "needs 'beta' and 'residuals'"),
    ([], "bad pairs section"),
])
def test_a_bad_pairs_section_is_refused_by_name(section: object, msg: str) -> None:
    with pytest.raises(PredictorError, match=msg):
        PairMemory.from_dict(section)


def test_non_finite_residual_in_a_model_file_is_refused() -> None:
    doc = json.loads(model_to_json(load_predictor()))
    key = next(iter(doc["pairs"]["residuals"]))
    text = json.dumps(doc).replace(f'"{key}": {doc["pairs"]["residuals"][key]}', f'"{key}": NaN')
    with pytest.raises(PredictorError, match="shipped|residual"):
        predictor_from_json(text, "shipped")


@pytest.fixture(scope="module")
def shipped_rows() -> list[Measurement]:
    return read_csv(DATA_DIR / "train_shipped.csv")


def test_shipped_model_remembers_pairs_and_round_trips(tmp_path: Path) -> None:
    pred = load_predictor()
    assert pred.pairs is not None and pred.pairs.beta.get("v100", 0.0) > 0.0
    save_model(pred, tmp_path / "m.json")
    again = load_predictor(tmp_path / "m.json")
    assert again.pairs == pred.pairs
    # a file without the section (written before it existed) still loads, without a memory
    doc = json.loads(model_to_json(pred))
    del doc["pairs"]
    assert predictor_from_json(json.dumps(doc)).pairs is None


def test_single_bulk_and_mps_paths_apply_the_same_shift(shipped_rows: list[Measurement]) -> None:
    pred = load_predictor()
    assert pred.pairs is not None
    # a V100 pairing whose mirror the shipped model remembers
    key = next(k for k in pred.pairs.residuals if k.startswith("v100|") and abs(pred.pairs.residuals[k]) > 0.1)
    _gpu, own, other = mirror(key).split("|")
    row = next(m for m in shipped_rows if m.gpu == "v100" and f"{m.desc.gflops_per_iter:.6g}" == own
               and len(m.desc.corunner_gflops) == 1 and f"{m.desc.corunner_gflops[0]:.6g}" == other)
    desc = row.desc
    shift = query_shift(pred.pairs, "v100", desc)
    assert shift == pytest.approx(pred.pairs.beta["v100"] * pred.pairs.residuals[key])
    without = predictor_from_json(json.dumps({k: v for k, v in json.loads(model_to_json(pred)).items() if k != "pairs"}))
    one = pred.predict(desc, ["v100"])["v100"].iter_time_p50
    assert one == pytest.approx(without.predict(desc, ["v100"])["v100"].iter_time_p50 * math.exp(shift), rel=1e-9)
    bulk = float(pred.predict_many([desc], ["v100"])[0, 0])
    assert bulk == pytest.approx(one, rel=1e-6)
    assert predict_rows(pred, [row])[0] == pytest.approx(one, rel=1e-6)
    # the same job described by model name and batch size only (GFLOPs from the model table at
    # that batch size) finds the same pairing
    named = WorkloadDescriptor(model=desc.model, batch_size=desc.batch_size, precision=desc.precision,
                               mode=desc.mode, corunner_gflops=desc.corunner_gflops)
    assert pred.predict(named, ["v100"])["v100"].iter_time_p50 == pytest.approx(
        without.predict(named, ["v100"])["v100"].iter_time_p50 * math.exp(shift), rel=1e-9)
    # an exclusive query and a pairing nobody measured are untouched
    alone = desc.with_corunners(())
    assert pred.predict(alone, ["v100"])["v100"].iter_time_p50 == pytest.approx(
        without.predict(alone, ["v100"])["v100"].iter_time_p50, rel=1e-9)
    stranger = WorkloadDescriptor(gflops_per_iter=desc.gflops_per_iter, params_m=desc.params_m,
                                  batch_size=desc.batch_size, corunner_gflops=(12345.0,))
    assert pred.predict(stranger, ["v100"])["v100"].iter_time_p50 == pytest.approx(
        without.predict(stranger, ["v100"])["v100"].iter_time_p50, rel=1e-9)


def test_pair_memory_is_skipped_without_mirrored_pairs(shipped_rows: list[Measurement]) -> None:
    exclusive = [m for m in shipped_rows if not m.desc.corunner_gflops][:300]
    assert pair_memory(exclusive, 10) is None
    assert train(exclusive, rounds=10, with_p90=False).pairs is None


def test_pair_memory_lowers_the_error_of_held_out_mirrored_v100_pairs(shipped_rows: list[Measurement]) -> None:
    """Real data (Gavel's V100 rows), 5-fold cross-validation over three random splits: on the
    held-out co-located rows whose mirror stayed in training, the pair memory must lower the
    error over all folds. (One split varies: -0.1% on split 0, -5% to -6% on splits 1-3, since
    training takes the rows in canonical order; before, the rows' order in the CSV moved the
    model without the memory between 13.9% and 15.0% on split 0, and the memory brought it to
    13.7-13.9% from each.)"""
    v100 = [m for m in shipped_rows if m.gpu == "v100" and m.source.startswith("gavel")]
    keys = [pair_key(m.gpu, m.desc.gflops_per_iter, m.desc.corunner_gflops, m.desc.num_gpus) for m in v100]
    errs: dict[str, list[float]] = {"without": [], "with": []}
    for split in range(3):
        idx = list(range(len(v100)))
        random.Random(split).shuffle(idx)
        for fold in range(5):
            held = set(idx[fold::5])
            tr = [m for i, m in enumerate(v100) if i not in held]
            present = {k for i, k in enumerate(keys) if i not in held and k is not None}
            test = [v100[i] for i in sorted(held) if keys[i] is not None and mirror(keys[i]) in present]
            model = train(tr, rounds=60, with_p90=False)
            assert model.pairs is not None and model.pairs.beta["v100"] > 0.2
            doc = json.loads(model_to_json(model))
            del doc["pairs"]
            for name, pred in (("without", predictor_from_json(json.dumps(doc))), ("with", model)):
                errs[name] += [abs(p - m.iter_time_s) / m.iter_time_s
                               for p, m in zip(predict_rows(pred, test), test, strict=True)]
    assert len(errs["with"]) >= 1200
    before, after = (sum(errs[n]) / len(errs[n]) for n in ("without", "with"))
    # measured: 13.66% -> 13.19% over the 1,478 held-out rows of the three splits (with the
    # full shipped data and rows in the CSV's order, bench/predictor.py: 15.4% -> 14.1%)
    assert after < 0.98 * before, (before, after)


def test_model_train_reports_the_pair_memory(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from slurm_hase.cli.model_cmd import model as model_group

    lines = (DATA_DIR / "train_shipped.csv").read_text().splitlines()
    v100 = [lines[0]] + [ln for ln in lines[1:] if ln.startswith("v100,") and "gavel:" in ln]
    data = tmp_path / "v100.csv"
    data.write_text("\n".join(v100) + "\n")
    res = CliRunner().invoke(model_group, ["train", "--data", str(data), "--out", str(tmp_path / "m.json")])
    assert res.exit_code == 0, res.output
    assert "pair memory:" in res.output and "beta v100 0." in res.output, res.output
    assert load_predictor(tmp_path / "m.json").pairs is not None
