"""Predictor API on the shipped model: predictions, bulk path, MPS, bad model files."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hase.errors import DescriptorError, PredictorError, UnknownGpuError
from slurm_hase.predict.api import Prediction
from slurm_hase.predict.catalog import gpu_keys
from slurm_hase.predict.descriptor import WorkloadDescriptor
from slurm_hase.predict.forest import predict_np
from slurm_hase.predict.modelfile import load_predictor, model_to_json, predictor_from_json

RESNET = WorkloadDescriptor(model="resnet50", batch_size=64, iterations=1000)


def test_predict_per_gpu_with_runtime() -> None:
    out = load_predictor().predict(RESNET, ["a100", "Tesla V100-SXM2-16GB", "k80"])
    assert set(out) == {"a100", "Tesla V100-SXM2-16GB", "k80"}
    p = out["Tesla V100-SXM2-16GB"]
    assert isinstance(p, Prediction) and p.gpu_type == "v100"
    assert 0 < p.iter_time_p50 <= p.iter_time_p90
    assert p.runtime_p50_s == pytest.approx(1000 * p.iter_time_p50)
    assert out["a100"].iter_time_p50 < out["v100" if False else "Tesla V100-SXM2-16GB"].iter_time_p50 < out["k80"].iter_time_p50


def test_no_iterations_no_runtime() -> None:
    p = load_predictor().predict(WorkloadDescriptor(model="bert-base", batch_size=16), ["t4"])["t4"]
    assert p.runtime_p50_s is None and p.runtime_p90_s is None


def test_bigger_batch_takes_longer() -> None:
    pred = load_predictor()
    small = pred.predict(WorkloadDescriptor(model="resnet50", batch_size=16), ["v100"])["v100"]
    big = pred.predict(WorkloadDescriptor(model="resnet50", batch_size=128), ["v100"])["v100"]
    assert big.iter_time_p50 > 2 * small.iter_time_p50


def test_predict_many_matches_predict() -> None:
    pred = load_predictor()
    descs = [RESNET, WorkloadDescriptor(model="lstm-lm", batch_size=20, precision="fp16"),
             WorkloadDescriptor(gflops_per_iter=500.0, mode="infer", precision="int8", corunner_gflops=(100.0,)),
             RESNET]
    gpus = gpu_keys()
    arr = pred.predict_many(descs, gpus)
    assert arr.shape == (4, len(gpus))
    assert list(arr[3]) == list(arr[0])  # duplicates are evaluated once and copied back
    for i, d in enumerate(descs):
        single = pred.predict(d, gpus)
        assert list(arr[i]) == pytest.approx([single[g].iter_time_p50 for g in gpus], rel=1e-9)


def test_numpy_trees_match_pure_python() -> None:
    import numpy as np

    from slurm_hase.predict.catalog import resolve_gpu
    from slurm_hase.predict.features import feature_matrix

    pred = load_predictor()
    # a type without training data but with a measured twin is predicted as the twin
    looks = [pred.twin(resolve_gpu(g)).key for g in gpu_keys()]
    x, base = feature_matrix([RESNET], [resolve_gpu(g) for g in looks])
    from slurm_hase.predict.keys import model_key

    mk = model_key(RESNET)
    scale = np.asarray([pred.factor(mk, g) for g in looks])  # per-level calibration
    s50 = predict_np(pred._trees["p50"], x)
    # the collaborative-filtering completion blended in where it knows the workload
    row = pred.cf_row(RESNET, mk)
    shift = np.asarray([pred.cf_shift(row, "", mk, g, float(s)) for g, s in zip(looks, s50, strict=True)])
    via_np = scale * np.exp(base + s50 + shift)
    single = pred.predict(RESNET, gpu_keys())
    assert list(via_np) == pytest.approx([single[g].iter_time_p50 for g in gpu_keys()], rel=1e-9)


def test_mps_slowdown() -> None:
    pred = load_predictor()
    co = [WorkloadDescriptor(model="resnet50", batch_size=128)]
    s = pred.mps_slowdown(WorkloadDescriptor(model="resnet18-cifar", batch_size=64), co, "v100")
    assert s > 1.0
    assert pred.mps_slowdown(RESNET, [], "v100") == 1.0


def test_errors() -> None:
    pred = load_predictor()
    with pytest.raises(UnknownGpuError):
        pred.predict(RESNET, ["v1000"])
    with pytest.raises(DescriptorError, match="gflops"):
        pred.predict(WorkloadDescriptor(model="mystery-net"), ["v100"])


@pytest.mark.parametrize(
    "content",
    ['{"format": "slurm-hase-predictor", "version": 1, "boost', "", "\x00\x01binary",
     '{"format": "other"}', '{"format": "slurm-hase-predictor", "version": 99}',
     '[1, 2]'],
)
def test_corrupt_model_file(tmp_path: Path, content: str) -> None:
    f = tmp_path / "m.json"
    f.write_text(content)
    with pytest.raises(PredictorError, match="m.json"):
        load_predictor(f)


def test_tampered_trees_rejected(tmp_path: Path) -> None:
    import base64
    import json
    from array import array

    doc = json.loads(model_to_json(load_predictor()))
    left = array("i", base64.b64decode(doc["trees"]["p50"]["left"]))
    left[0] = 10**6  # child index out of range
    doc["trees"]["p50"]["left"] = base64.b64encode(left.tobytes()).decode()
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(doc))
    with pytest.raises(PredictorError, match="out of range"):
        load_predictor(f)
    doc["trees"]["p50"]["left"] = "not base64!"
    f.write_text(json.dumps(doc))
    with pytest.raises(PredictorError, match="base64"):
        load_predictor(f)
    with pytest.raises(PredictorError):
        load_predictor(tmp_path / "missing.json")


def test_extrapolation_is_named() -> None:
    """The shipped data has fp32 training and fp16/int8 inference only: fp16 training is said
    to be an extrapolation, measured regimes are not."""
    pred = load_predictor()
    assert "fp32/train" in pred.meta["regimes"] and "fp16/train" not in pred.meta["regimes"]
    assert pred.extrapolation(RESNET) is None
    why = pred.extrapolation(WorkloadDescriptor(model="resnet50", batch_size=64, precision="fp16"))
    assert why is not None and "no fp16 train measurements" in why
    unseen = pred.extrapolation(WorkloadDescriptor(model="gpt2", batch_size=8))
    assert unseen is not None and "no measurements of gpt2" in unseen
    old = predictor_from_json(model_to_json(pred))  # a copy: load_predictor() is shared
    old.meta.pop("regimes")  # a model trained before regimes were recorded never says
    assert old.extrapolation(WorkloadDescriptor(model="resnet50", precision="fp16")) is None


def test_identical_hardware_gets_identical_predictions() -> None:
    """A100 PCIe 40 GB has no training rows but the catalog figures of the measured A100 SXM 40 GB:
    it is predicted as that type, by predict() and predict_many() alike."""
    pred = load_predictor()
    out = pred.predict(RESNET, ["a100", "a100pcie", "a100m80"])
    assert out["a100pcie"].iter_time_p50 == out["a100"].iter_time_p50
    assert out["a100pcie"].gpu_type == "a100pcie"
    assert out["a100m80"].iter_time_p50 != out["a100"].iter_time_p50  # another chip: its own
    bulk = pred.predict_many([RESNET], ["a100", "a100pcie"])
    assert bulk[0, 0] == bulk[0, 1] == pytest.approx(out["a100"].iter_time_p50, rel=1e-9)
