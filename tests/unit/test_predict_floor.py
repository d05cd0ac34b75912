"""Physically possible predictions: the floor from the catalog's own figures (no iteration faster
than its FLOPs at peak or its weights at full bandwidth), unseen models ranked like the catalog,
and bf16 on GPUs without bf16 at FP32 speed (docs/predictor.md, "The physical floor")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_hase.errors import PredictorError
from slurm_hase.predict.catalog import catalog, gpu_keys, resolve_gpu
from slurm_hase.predict.dataset import read_csv
from slurm_hase.predict.descriptor import WorkloadDescriptor
from slurm_hase.predict.modelfile import load_predictor, model_to_json, predictor_from_json
from slurm_hase.predict.models import MODELS, fill
from tests.conftest import REPO

SHIPPED_CSV = REPO / "slurm_hase" / "data" / "train_shipped.csv"
BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2}
FOUR = ["a100", "v100", "t4", "p100"]


def _floor(desc: WorkloadDescriptor, gpu: str) -> float:
    """The physical floor worked out here from the catalog alone: the descriptor's GFLOPs per
    iteration at the GPU's peak for the precision, or its weights read once at full bandwidth
    (split over its GPUs), whichever takes longer."""
    spec, f = resolve_gpu(gpu), fill(desc)
    compute = f.gflops * 1e9 / (spec.peak_tflops(desc.precision) * 1e12)
    weights = f.params_m * 1e6 * BYTES[desc.precision] / desc.num_gpus / (spec.mem_bw_gbs * 1e9)
    return max(compute, weights)


def _unseen_workloads() -> list[WorkloadDescriptor]:
    """Every model-table model the shipped data never measured, by name, in FP32 training, FP16
    training and inference at its usual batch, plus anonymous workloads (GFLOPs / params only)."""
    seen = {m.model for m in read_csv(SHIPPED_CSV)}
    out = [WorkloadDescriptor(model=name, batch_size=info.default_batch, precision=prec, mode=mode)
           for name, info in MODELS.items() if name not in seen
           for prec, mode in (("fp32", "train"), ("fp16", "train"), ("fp16", "infer"))]
    out += [WorkloadDescriptor(model="mynet", params_m=100.0),
            WorkloadDescriptor(gflops_per_iter=1574.0, params_m=25.6, batch_size=64),
            WorkloadDescriptor(gflops_per_iter=50.0, params_m=2000.0, batch_size=1, num_gpus=4),
            WorkloadDescriptor(gflops_per_iter=3e4, params_m=7000.0, batch_size=8, precision="bf16")]
    return out


def test_the_reviewers_examples_are_no_longer_impossible() -> None:
    pred = load_predictor()
    # ResNet-101 batch 32 training: 1,507 GFLOP per iteration; at the A100's 19.5 TFLOPS FP32
    # peak that takes 77 ms (the old 20 ms meant 76 TFLOPS)
    r101 = WorkloadDescriptor(model="resnet101", batch_size=32, iterations=10000)
    got = pred.predict(r101, FOUR)
    assert fill(r101).gflops == pytest.approx(1507.2)
    assert got["a100"].iter_time_p50 >= 1507.2e9 / 19.49e12 * 0.999
    # 100 M parameters: 400 MB of FP32 weights take 256 us to read at the A100's 1,560 GB/s
    mynet = pred.predict(WorkloadDescriptor(model="mynet", params_m=100.0), ["a100", "v100"])
    assert mynet["a100"].iter_time_p50 >= 400e6 / 1560e9 * 0.999
    # the V100 beats the T4 on both FP32 peak and bandwidth: so it does for unseen models
    for name in ("resnet101", "vgg16", "vit-b16", "gpt2", "resnet152", "unet"):
        p = pred.predict(WorkloadDescriptor(model=name), ["v100", "t4"])
        assert p["v100"].iter_time_p50 < p["t4"].iter_time_p50, name


def test_no_unseen_prediction_is_faster_than_the_floor() -> None:
    pred = load_predictor()
    gpus = gpu_keys()
    descs = _unseen_workloads()
    bulk = pred.predict_many(descs, gpus)
    bulk90 = pred.predict_many_q(descs, gpus, "p90")
    for i, d in enumerate(descs):
        single = pred.predict(d, gpus)
        for j, g in enumerate(gpus):
            least = _floor(d, g) * (1 - 1e-9)
            assert single[g].iter_time_p50 >= least, (d, g)
            assert single[g].iter_time_p90 >= single[g].iter_time_p50
            assert bulk[i, j] == pytest.approx(single[g].iter_time_p50, rel=1e-9)
            assert bulk90[i, j] >= bulk[i, j]


def test_unseen_models_rank_gpu_types_like_the_catalog() -> None:
    # a type with at least the peak TFLOPS at the job's precision and at least the bandwidth of
    # another is never predicted slower for a model the training data never measured
    pred = load_predictor()
    specs = list(catalog().values())
    descs = [d for d in _unseen_workloads() if d.model is not None and d.model != "mynet"]
    times = pred.predict_many(descs, [s.key for s in specs])
    wrong = []
    for i, d in enumerate(descs):
        for a, sa in enumerate(specs):
            for b, sb in enumerate(specs):
                pa, pb = sa.peak_tflops(d.precision), sb.peak_tflops(d.precision)
                if pa >= pb and sa.mem_bw_gbs >= sb.mem_bw_gbs and times[i, a] > times[i, b] * (1 + 1e-9):
                    wrong.append((d.model, d.precision, d.mode, sa.key, sb.key))
    assert not wrong, wrong[:10]


def test_named_and_anonymous_descriptions_of_one_workload_agree() -> None:
    # ResNet-50 batch 64 by name (measured) and as its GFLOPs and parameters (anonymous, unseen)
    pred = load_predictor()
    named = pred.predict(WorkloadDescriptor(model="resnet50", batch_size=64), gpu_keys())
    anon = pred.predict(WorkloadDescriptor(gflops_per_iter=1574.4, params_m=25.6, batch_size=64), gpu_keys())
    ratio = {g: named[g].iter_time_p50 / anon[g].iter_time_p50 for g in gpu_keys()}
    # The bounds are the shipped model's (trained in canonical row order, session 44: H100 2.11,
    # 4.53 at most) with a margin. Row order alone moved them, before training sorted the rows:
    # H100 1.65-2.42 and the largest 3.32-5.62 over the CSV's order, the sorted one and three
    # shuffles (bagging and the out-of-fold splits pick rows by position).
    for g in [*FOUR, "k80", "h100"]:
        assert 0.5 < ratio[g] < 2.5, (g, ratio[g])  # the old model: 7x on the A100, 5.6x on the H100
    # Ampere/Ada cards whose catalog FP32 peak counts dual issue put the anonymous workload at
    # its floor; still within 5x everywhere (the old model: up to 9x, H100 PCIe)
    assert max(max(r, 1 / r) for r in ratio.values()) < 5.0, ratio


def test_the_floor_never_sits_above_a_training_measurement() -> None:
    # a measured (model, mode) gets the lowest measured / floor ratio of its rows as its scale:
    # the model table's FLOPs overstate some models (Gavel's Recommendation and LSTM, MLPerf's
    # packed BERT), and the floor must not contradict what was measured
    pred = load_predictor()
    rows = read_csv(SHIPPED_CSV)
    floors = pred.floor_rows(rows)
    assert all(f <= m.iter_time_s for f, m in zip(floors, rows, strict=True))
    assert pred.floor_scales is not None
    assert pred.floor_scales["recommendation|train"] < 0.6  # its rows beat the plain floor
    assert pred.floor_scales["resnet50|train"] == 1.0


def test_the_floor_survives_the_model_file_and_bad_scales_are_refused(tmp_path: Path) -> None:
    pred = load_predictor()
    back = predictor_from_json(model_to_json(pred))
    assert back.floor_scales == pred.floor_scales
    doc = json.loads(model_to_json(pred))
    doc["floor"]["scales"]["resnet50|train"] = 7.0
    with pytest.raises(PredictorError, match=r"floor: bad scale 'resnet50\|train'"):
        predictor_from_json(json.dumps(doc), "m.json")
    # a file from before the floor: unseen models are floored, measured ones keep the trees' answer
    del doc["floor"]
    old = predictor_from_json(json.dumps(doc))
    assert old.floor_scales is None
    assert old.floor_scale("resnet50", "train") == 0.0 and old.floor_scale("resnet101", "train") == 1.0
    r101 = WorkloadDescriptor(model="resnet101", batch_size=32)
    assert old.predict(r101, ["a100"])["a100"].iter_time_p50 >= _floor(r101, "a100") * (1 - 1e-9)


def test_mps_slowdown_is_still_a_slowdown() -> None:
    pred = load_predictor()
    job = WorkloadDescriptor(model="resnet101", batch_size=32)
    co = [WorkloadDescriptor(model="vgg16", batch_size=64)]
    for g in FOUR:
        assert pred.mps_slowdown(job, co, g) >= 1.0


# -- bf16 ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("key", ["v100", "t4", "p100", "k80"])
def test_bf16_without_bf16_runs_at_fp32_speed(key: str) -> None:
    spec = resolve_gpu(key)
    assert spec.compute_capability < 8.0  # what the catalog says: no bf16 before Ampere (8.0)
    assert spec.peak_tflops("bf16") == spec.fp32_tflops == spec.peak_tflops("tf32")
    pred = load_predictor()
    desc = {"model": "resnet50", "batch_size": 64}
    bf16 = pred.predict(WorkloadDescriptor(**desc, precision="bf16"), [key])[key].iter_time_p50
    fp16 = pred.predict(WorkloadDescriptor(**desc, precision="fp16"), [key])[key].iter_time_p50
    if spec.peak_tflops("fp16") > spec.fp32_tflops:  # fast FP16 (not the K80): bf16 is slower
        assert bf16 > 1.25 * fp16  # the old catalog: exactly the fp16 time
    assert not spec.has_bf16


def test_bf16_with_bf16_runs_like_fp16() -> None:
    pred = load_predictor()
    for spec in catalog().values():
        if spec.compute_capability >= 8.0:
            assert spec.peak_tflops("bf16") == spec.peak_tflops("fp16")
    d = {"model": "resnet50", "batch_size": 64}
    got = {p: pred.predict(WorkloadDescriptor(**d, precision=p), ["a100", "h100"]) for p in ("bf16", "fp16")}
    assert {g: v.iter_time_p50 for g, v in got["bf16"].items()} == {g: v.iter_time_p50 for g, v in got["fp16"].items()}
