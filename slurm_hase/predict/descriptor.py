"""Workload descriptor: what a job is, as the predictor needs it.

Users write ``#HASE key=value`` lines (parsed into a mapping by hsbatch); the descriptor travels
to the daemon in the Slurm job comment as compact versioned JSON (``{"hase":1,...}``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from slurm_hase.errors import DescriptorError

PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "bf16", "tf32", "int8")
MODES: tuple[str, ...] = ("train", "infer")
COMMENT_VERSION = 1
MAX_COMMENT_BYTES = 512
MAX_CORUNNERS = 16
_MODEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+\-]{0,63}$")
_COMMENT_START = '{"hase":'
_TYPE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,31}$")

# key in `#HASE key=value` lines / from_mapping -> canonical key
_ALIASES: dict[str, str] = {
    "model": "model",
    "gflops": "gflops",
    "gflops_per_iter": "gflops",
    "params": "params",
    "params_m": "params",
    "batch_size": "batch_size",
    "bs": "batch_size",
    "precision": "precision",
    "prec": "precision",
    "mode": "mode",
    "gpus": "gpus",
    "num_gpus": "gpus",
    "iterations": "iterations",
    "iters": "iterations",
    "epochs": "epochs",
    "steps_per_epoch": "steps_per_epoch",
    "mps": "mps",
    "mps_share": "mps",
    "corunner_gflops": "corunners",
    "corunners": "corunners",
    "co": "corunners",
    "checkpoint": "checkpoint",
    "ckpt": "checkpoint",
    "share": "share",
    "may_share": "share",
    "auto_types": "auto_types",
    "at": "auto_types",
}
_YES = {"1": True, "yes": True, "true": True, "on": True, "0": False, "no": False, "false": False,
        "off": False}


KEYS: tuple[str, ...] = tuple(sorted(set(_ALIASES.values())))
# Written by hsbatch itself into the job comment (the GPU types it constrained the job to, which
# the daemon may change); a user who sets it would hand their own constraint to the daemon.
INTERNAL_KEYS = frozenset({"auto_types"})
USER_KEYS: tuple[str, ...] = tuple(k for k in KEYS if k not in INTERNAL_KEYS)


def key_aliases(internal: bool = False) -> list[str]:
    """Every spelling of a descriptor key a user may type (with ``internal``: hsbatch's own
    keys too), sorted."""
    return sorted(a for a, k in _ALIASES.items() if internal or k not in INTERNAL_KEYS)


def canonical_key(name: str) -> str:
    """The canonical descriptor key for a ``#HASE`` key or alias (``bs`` -> ``batch_size``);
    DescriptorError for an unknown key."""
    key = _ALIASES.get(str(name).strip().lower().replace("-", "_"))
    if key is None:
        raise DescriptorError(f"{name}: unknown key ({unknown_key_hint(name)}known: {', '.join(USER_KEYS)})")
    return key


def unknown_key_hint(name: str) -> str:
    """'did you mean <closest accepted spelling>? ' for a key nobody accepts, or ''."""
    import difflib

    close = difflib.get_close_matches(str(name).strip().lower().replace("-", "_"), key_aliases(), n=1)
    return f"did you mean {close[0]}? " if close else ""


@dataclass(frozen=True)
class WorkloadDescriptor:
    """One job's workload as the predictor sees it (None = unknown)."""

    model: str | None = None
    gflops_per_iter: float | None = None
    params_m: float | None = None
    batch_size: int | None = None
    precision: str = "fp32"
    mode: str = "train"
    num_gpus: int = 1
    iterations: int | None = None
    mps_share: int | None = None
    corunner_gflops: tuple[float, ...] = ()
    # The job saves its state when Slurm signals it and resumes from it after a requeue, so
    # the scheduler may requeue it to rotate GPUs between accounts (opt-in).
    checkpoint: bool = False
    # The job may run on half a GPU through MPS beside another job, when the scheduler pairs
    # it (opt-in; Slurm 24.11 or later: docs/mps.md, "Pairing waiting jobs").
    may_share: bool = False
    # The GPU-type constraint hsbatch added at submission (so the daemon may change it later;
    # a constraint the user wrote is never touched). () = hsbatch added none.
    auto_types: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_model(self.model)
        _check_pos_float("gflops", self.gflops_per_iter)
        _check_pos_float("params", self.params_m)
        _check_int("batch_size", self.batch_size, 1, 10_000_000)
        if self.precision not in PRECISIONS:
            raise DescriptorError(f"precision: {self.precision!r} is not one of {', '.join(PRECISIONS)}")
        if self.mode not in MODES:
            raise DescriptorError(f"mode: {self.mode!r} is not one of {', '.join(MODES)}")
        _check_int("gpus", self.num_gpus, 1, 4096)
        _check_int("iterations", self.iterations, 1, 10**12)
        _check_int("mps", self.mps_share, 1, 100)
        if len(self.corunner_gflops) > MAX_CORUNNERS:
            raise DescriptorError(f"corunners: at most {MAX_CORUNNERS} co-runners")
        for g in self.corunner_gflops:
            _check_pos_float("corunners", g)
        if len(self.auto_types) > MAX_CORUNNERS or not all(
                _TYPE_RE.match(t) for t in self.auto_types):
            raise DescriptorError("auto_types: GPU type names (letters, digits, - _ .)")

    @classmethod
    def from_mapping(cls, d: Mapping[str, object]) -> WorkloadDescriptor:
        """Build and validate from a mapping (values may be strings as from ``#HASE k=v``)."""
        return cls.from_pairs(d.items())

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[str, object]]) -> WorkloadDescriptor:
        """Build and validate from (key, value) pairs in the order given, e.g. the words of
        ``--spec 'model=resnet50 bs=64'``: a key given twice, under any of its spellings
        (``bs=64 bs=32``, ``bs=64 batch_size=32``), is refused as hsbatch refuses it, never
        silently overridden by the later one."""
        canon: dict[str, object] = {}
        for raw_key, value in pairs:
            key = canonical_key(str(raw_key))
            if key in canon:
                raise DescriptorError(f"{raw_key}: given twice")
            canon[key] = value
        kw: dict[str, Any] = {}
        if (v := canon.get("model")) not in (None, ""):
            kw["model"] = str(v).strip()
        if (v := canon.get("gflops")) not in (None, ""):
            kw["gflops_per_iter"] = _to_float("gflops", v)
        if (v := canon.get("params")) not in (None, ""):
            kw["params_m"] = _to_float("params", v)
        if (v := canon.get("batch_size")) not in (None, ""):
            kw["batch_size"] = _to_int("batch_size", v)
        if (v := canon.get("precision")) not in (None, ""):
            kw["precision"] = str(v).strip().lower()
        if (v := canon.get("mode")) not in (None, ""):
            mode = str(v).strip().lower()
            kw["mode"] = {"training": "train", "inference": "infer"}.get(mode, mode)
        if (v := canon.get("gpus")) not in (None, ""):
            kw["num_gpus"] = _to_int("gpus", v)
        if (v := canon.get("mps")) not in (None, ""):
            kw["mps_share"] = _to_int("mps", str(v).rstrip("%") if isinstance(v, str) else v)
        if (v := canon.get("corunners")) not in (None, ""):
            kw["corunner_gflops"] = _to_floats("corunners", v)
        kw["iterations"] = _iterations(canon)
        if (v := canon.get("checkpoint")) not in (None, ""):
            kw["checkpoint"] = _to_bool("checkpoint", v)
        if (v := canon.get("share")) not in (None, ""):
            kw["may_share"] = _to_bool("share", v)
        if (v := canon.get("auto_types")) not in (None, ""):
            items = v.split("|") if isinstance(v, str) else v
            if not isinstance(items, list | tuple):
                raise DescriptorError("auto_types: expected types like 'a100|v100'")
            kw["auto_types"] = tuple(str(t).strip().lower() for t in items)
        return cls(**kw)

    def to_comment(self) -> str:
        """Compact versioned JSON for the Slurm job comment (<= 512 bytes)."""
        out: dict[str, object] = {"hase": COMMENT_VERSION}
        if self.model is not None:
            out["model"] = self.model
        if self.gflops_per_iter is not None:
            out["gflops"] = _short(self.gflops_per_iter)
        if self.params_m is not None:
            out["params"] = _short(self.params_m)
        if self.batch_size is not None:
            out["bs"] = self.batch_size
        if self.precision != "fp32":
            out["prec"] = self.precision
        if self.mode != "train":
            out["mode"] = self.mode
        if self.num_gpus != 1:
            out["gpus"] = self.num_gpus
        if self.iterations is not None:
            out["iters"] = self.iterations
        if self.mps_share is not None:
            out["mps"] = self.mps_share
        if self.corunner_gflops:
            out["co"] = [_short(g) for g in self.corunner_gflops]
        if self.checkpoint:
            out["ckpt"] = 1
        if self.may_share:
            out["share"] = 1
        if self.auto_types:
            out["at"] = "|".join(self.auto_types)
        text = json.dumps(out, separators=(",", ":"), allow_nan=False)
        if len(text.encode()) > MAX_COMMENT_BYTES:
            raise DescriptorError(f"descriptor: comment would be {len(text.encode())} bytes (> {MAX_COMMENT_BYTES})")
        return text

    @classmethod
    def from_comment(cls, text: str) -> WorkloadDescriptor | None:
        """Parse a job comment; None if it carries no slurm-hase descriptor."""
        if not text:
            return None
        start = text.find(_COMMENT_START)
        if start < 0:
            return None
        if len(text.encode("utf-8", "replace")) - start > 4 * MAX_COMMENT_BYTES:
            raise DescriptorError("comment: descriptor is oversized")
        try:
            obj, _end = json.JSONDecoder(parse_constant=_reject_constant).raw_decode(text, start)
        except (ValueError, RecursionError) as exc:
            raise DescriptorError(f"comment: malformed descriptor JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise DescriptorError("comment: descriptor is not a JSON object")
        if len(json.dumps(obj, separators=(",", ":")).encode()) > MAX_COMMENT_BYTES:
            raise DescriptorError("comment: descriptor is oversized")
        version = obj.pop("hase")
        if version != COMMENT_VERSION or isinstance(version, bool):
            raise DescriptorError(f"hase: unsupported descriptor version {version!r}")
        for key, value in obj.items():
            if key == "co":
                if not isinstance(value, list):
                    raise DescriptorError("co: must be a list of numbers")
                if any(isinstance(x, bool) or not isinstance(x, int | float) for x in value):
                    raise DescriptorError("co: must be a list of numbers")
            elif value is not None and (isinstance(value, bool) or not isinstance(value, str | int | float)):
                raise DescriptorError(f"{key}: must be a string or number")
        return cls.from_mapping(obj)

    def with_corunners(self, corunner_gflops: tuple[float, ...]) -> WorkloadDescriptor:
        """A copy sharing its GPU (MPS) with jobs of the given GFLOPs per iteration."""
        return replace(self, corunner_gflops=tuple(corunner_gflops))


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not allowed")


def _short(x: float) -> float | int:
    """Round to 4 significant digits to keep comments short."""
    r = float(f"{x:.4g}")
    return int(r) if r.is_integer() and abs(r) < 1e15 else r


def _check_model(model: str | None) -> None:
    if model is not None and (not isinstance(model, str) or not _MODEL_RE.match(model)):
        raise DescriptorError(f"model: {model!r} is not a valid model name (letters, digits, _.+-, <= 64)")


def _check_pos_float(key: str, value: float | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DescriptorError(f"{key}: {value!r} is not a number")
    if not math.isfinite(value) or value <= 0 or value > 1e12:
        raise DescriptorError(f"{key}: {value!r} must be a positive number at most 1e12")


def _check_int(key: str, value: int | None, lo: int, hi: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise DescriptorError(f"{key}: {value!r} is not an integer")
    if not lo <= value <= hi:
        raise DescriptorError(f"{key}: {value} is out of range {lo}..{hi}")


def _to_float(key: str, v: object) -> float:
    if isinstance(v, bool):
        raise DescriptorError(f"{key}: {v!r} is not a number")
    try:
        f = float(v.strip() if isinstance(v, str) else v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise DescriptorError(f"{key}: {v!r} is not a number") from None
    _check_pos_float(key, f)
    return f


def _to_int(key: str, v: object) -> int:
    if isinstance(v, bool):
        raise DescriptorError(f"{key}: {v!r} is not an integer")
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str) and re.fullmatch(r"\s*[+-]?\d{1,15}\s*", v):
        return int(v)
    raise DescriptorError(f"{key}: {v!r} is not an integer")


def _to_floats(key: str, v: object) -> tuple[float, ...]:
    if isinstance(v, str):
        parts: list[object] = [p for p in re.split(r"[;,\s]+", v.strip()) if p]
    elif isinstance(v, list | tuple):
        parts = list(v)
    else:
        raise DescriptorError(f"{key}: {v!r} is not a list of numbers")
    if len(parts) > MAX_CORUNNERS:
        raise DescriptorError(f"{key}: at most {MAX_CORUNNERS} co-runners")
    return tuple(_to_float(key, p) for p in parts)


def _iterations(canon: Mapping[str, object]) -> int | None:
    iters = canon.get("iterations")
    epochs = canon.get("epochs")
    spe = canon.get("steps_per_epoch")
    if iters not in (None, ""):
        if epochs not in (None, "") or spe not in (None, ""):
            raise DescriptorError("iterations: give either iterations or epochs+steps_per_epoch, not both")
        return _to_int("iterations", iters)
    if epochs in (None, "") and spe in (None, ""):
        return None
    if epochs in (None, ""):
        raise DescriptorError("epochs: needed together with steps_per_epoch")
    if spe in (None, ""):
        raise DescriptorError("steps_per_epoch: needed together with epochs")
    e, s = _to_int("epochs", epochs), _to_int("steps_per_epoch", spe)
    if e < 1 or s < 1:
        raise DescriptorError("epochs: epochs and steps_per_epoch must be >= 1")
    return e * s


def _to_bool(key: str, value: object) -> bool:
    """yes/no, true/false, on/off, 1/0 (any case) -> bool; DescriptorError otherwise."""
    if isinstance(value, bool):
        return value
    hit = _YES.get(str(value).strip().lower())
    if hit is None:
        raise DescriptorError(f"{key}: expected yes or no, got {value!r}")
    return hit
