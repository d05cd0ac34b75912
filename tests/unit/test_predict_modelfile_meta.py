"""The model file's `meta` section (a null or wrong-typed one is refused, older versions still
load as documented) and `shipped` naming the packaged model for every model-file option."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from slurm_hase.errors import PredictorError
from slurm_hase.predict.catalog import DATA_DIR
from slurm_hase.predict.descriptor import WorkloadDescriptor
from slurm_hase.predict.modelfile import (
    DEFAULT_MODEL,
    MODEL_VERSION,
    load_predictor,
    model_source,
    predictor_from_json,
)

D = WorkloadDescriptor(model="resnet50", batch_size=64)


@pytest.fixture(scope="module")
def shipped_doc() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((DATA_DIR / DEFAULT_MODEL).read_text())
    assert doc["version"] == MODEL_VERSION
    return doc


@pytest.mark.parametrize(("meta", "got"), [(None, "null"), ([], "list"), ("x", "str"), (3, "int")])
def test_a_null_or_wrong_typed_meta_is_refused(meta: object, got: str, tmp_path: Path,
                                               shipped_doc: dict[str, Any]) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps({**shipped_doc, "meta": meta}))
    with pytest.raises(PredictorError) as exc:
        load_predictor(path)
    assert str(exc.value) == f"{path}: 'meta' must be a JSON object, got {got}"


def test_a_current_file_without_meta_is_refused(tmp_path: Path, shipped_doc: dict[str, Any]) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps({k: v for k, v in shipped_doc.items() if k != "meta"}))
    with pytest.raises(PredictorError) as exc:
        load_predictor(path)
    assert str(exc.value) == f"{path}: model file has no 'meta' section"


def test_older_documented_files_still_load(shipped_doc: dict[str, Any]) -> None:
    shipped = load_predictor()
    want = shipped.predict(D, ["a100"])["a100"].iter_time_p50
    # a version 2 file (no completion section) without meta loads, as before
    v2 = {k: v for k, v in shipped_doc.items() if k not in ("meta", "completion", "completion_multi")}
    v2["version"] = 2
    assert predictor_from_json(json.dumps(v2), "v2.json").meta == {}
    # a current file without compute_weight (before session 21): the compute roofline, as trained
    no_weight = {**shipped_doc, "meta": {k: v for k, v in shipped_doc["meta"].items()
                                         if k != "compute_weight"}}
    assert predictor_from_json(json.dumps(no_weight)).compute_weight == 1.0
    # the shipped file itself predicts exactly as before
    again = predictor_from_json(json.dumps(shipped_doc))
    assert again.predict(D, ["a100"])["a100"].iter_time_p50 == want


@pytest.mark.parametrize(("value", "source"), [(None, None), ("", None), ("shipped", None),
                                               ("./shipped", "./shipped"), ("m.json", "m.json")])
def test_model_source(value: str | None, source: str | None) -> None:
    assert model_source(value) == source


def test_shipped_loads_the_packaged_model() -> None:
    assert load_predictor("shipped") is load_predictor()
    assert load_predictor(Path("shipped")) is load_predictor()


def test_hsbatch_predictor_option_takes_shipped() -> None:
    """hsbatch --hase-predictor=shipped (and HASE_PREDICTOR=shipped) load through here."""
    from slurm_hase.hsbatch.judge import load_predict as _load_predict

    got = _load_predict("shipped")(D, ["a100"])
    assert got == load_predictor().predict(D, ["a100"])
