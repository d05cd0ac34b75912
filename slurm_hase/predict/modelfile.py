"""The predictor's model file: its format, writing it, and reading it back with clear errors."""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path

from slurm_hase.errors import PredictorError
from slurm_hase.predict import features as F
from slurm_hase.predict.api import Predictor
from slurm_hase.predict.bound import check_scales
from slurm_hase.predict.catalog import DATA_DIR
from slurm_hase.predict.completion import Completion
from slurm_hase.predict.forest import pack_trees, trees_from_lists, unpack_trees
from slurm_hase.predict.pairs import PairMemory

MODEL_FORMAT = "slurm-hase-predictor"
MODEL_VERSION = 3
# 1: trees as JSON number lists (slower to load); 2: no completion section
READABLE_VERSIONS = (1, 2, 3)
DEFAULT_MODEL = "predictor.json"
MAX_MODEL_BYTES = 64 * 1024 * 1024
SHIPPED = "shipped"  # names the packaged model wherever a model file is asked for


def model_source(value: str | Path | None) -> str | Path | None:
    """A model file option's value with ``shipped`` (and None or "") meaning the packaged
    model: None for it, the path otherwise (a file named "shipped": give ``./shipped``)."""
    return None if value is None or str(value) in ("", SHIPPED) else value


def model_to_json(pred: Predictor) -> str:
    """The model file's text."""
    doc = {"format": MODEL_FORMAT, "version": MODEL_VERSION, "features": list(F.FEATURES),
           "meta": pred.meta, "boosters": pred.boosters,
           "calibration": {"factors": pred.factors, "known": pred.known},
           "trees": {q: pack_trees(ts) for q, ts in pred.trees.items()}}
    if pred.completion is not None:
        doc["completion"] = pred.completion.as_dict()
    if pred.completion_multi is not None:
        doc["completion_multi"] = pred.completion_multi.as_dict()
    if pred.pairs is not None:
        doc["pairs"] = pred.pairs.as_dict()
    if pred.floor_scales is not None:
        doc["floor"] = {"scales": pred.floor_scales}
    return json.dumps(doc, separators=(",", ":"))


def save_model(pred: Predictor, path: str | Path) -> None:
    """Write the model file (atomically: a reader never sees half a file); PredictorError naming
    the path if it cannot be written (the staging file removed, an older file left as it was)."""
    from slurm_hase.predict.files import write_together  # not on the load path (hsbatch start-up)

    write_together([(path, model_to_json(pred), PredictorError)])


def predictor_from_json(text: str, origin: str = "model") -> Predictor:
    """Parse a model file's text; PredictorError on anything unexpected."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise PredictorError(f"{origin}: not a slurm-hase model file (bad JSON: {exc})") from None
    if not isinstance(doc, Mapping) or doc.get("format") != MODEL_FORMAT:
        raise PredictorError(f"{origin}: not a slurm-hase model file")
    if doc.get("version") not in READABLE_VERSIONS:
        raise PredictorError(f"{origin}: unsupported model version {doc.get('version')!r}")
    if list(doc.get("features", [])) != list(F.FEATURES):
        raise PredictorError(f"{origin}: model was trained with other features; retrain it")
    boosters = doc.get("boosters")
    # every version wrote `meta` as an object; only files before version 3 may lack it
    if "meta" not in doc and doc.get("version") == MODEL_VERSION:
        raise PredictorError(f"{origin}: model file has no 'meta' section")
    meta = doc.get("meta", {})
    if not isinstance(meta, Mapping):
        raise PredictorError(f"{origin}: 'meta' must be a JSON object, got "
                             f"{'null' if meta is None else type(meta).__name__}")
    if not isinstance(boosters, Mapping) or not all(isinstance(v, str) for v in boosters.values()):
        raise PredictorError(f"{origin}: model file has no boosters")
    cal = doc.get("calibration", {})
    if not isinstance(cal, Mapping):
        raise PredictorError(f"{origin}: bad calibration section")
    factors, known = cal.get("factors", {}), cal.get("known", {})
    if not isinstance(factors, Mapping) or not isinstance(known, Mapping) or not all(
        isinstance(k, str) and isinstance(v, list) and all(isinstance(g, str) for g in v) for k, v in known.items()
    ):
        raise PredictorError(f"{origin}: bad calibration section")
    try:
        trees = {q: [trees_from_lists(t) for t in ts] if isinstance(ts, list) else unpack_trees(ts, len(F.FEATURES))
                 for q, ts in doc.get("trees", {}).items()}
        comp, multi, pairs = doc.get("completion"), doc.get("completion_multi"), doc.get("pairs")
        floor = doc.get("floor")
        if floor is not None and not isinstance(floor, Mapping):
            raise ValueError("floor: expected an object")
        scales = None if floor is None else check_scales(floor.get("scales", {}))
        return Predictor(boosters=dict(boosters), meta=dict(meta),
                         factors=dict(factors), known={k: list(v) for k, v in known.items()},
                         completion=None if comp is None else Completion.from_dict(comp),
                         completion_multi=None if multi is None else Completion.from_dict(multi),
                         pairs=None if pairs is None else PairMemory.from_dict(pairs), floor_scales=scales,
                         _trees=trees)
    except (PredictorError, TypeError, ValueError, AttributeError) as exc:
        raise PredictorError(f"{origin}: {exc}") from None


def load_predictor(path: str | Path | None = None) -> Predictor:
    """Load a model file (None or ``shipped``: the default model shipped in the package)."""
    source = model_source(path)
    if source is None:
        return _default()
    p = Path(source)
    try:
        if p.stat().st_size > MAX_MODEL_BYTES:
            raise PredictorError(f"{p}: model file is larger than {MAX_MODEL_BYTES} bytes")
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PredictorError(f"{p}: cannot read model file ({exc})") from None
    return predictor_from_json(text, str(p))


@lru_cache(maxsize=1)
def _default() -> Predictor:
    try:
        text = (DATA_DIR / DEFAULT_MODEL).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PredictorError(f"shipped model missing or unreadable ({exc}); run `hase model train`") from None
    return predictor_from_json(text, "shipped model")
