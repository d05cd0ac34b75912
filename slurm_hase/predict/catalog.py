"""GPU catalog: public specs per GPU type; every common spelling resolves to one entry."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from slurm_hase.errors import PredictorError, UnknownGpuError

DATA_DIR = Path(__file__).resolve().parents[1] / "data"  # package data (plain files, not zipped)
GENERATIONS: tuple[str, ...] = ("kepler", "pascal", "volta", "turing", "ampere", "ada", "hopper")
_PREFIXES = ("virtualized", "nvidia", "tesla", "geforce", "quadro")
_SUFFIXES = ("cts",)
# bf16 arithmetic (tensor cores) arrived with compute capability 8.0 (Ampere)
BF16_MIN_CC = 8.0


@dataclass(frozen=True)
class GpuSpec:
    """One GPU type. ``key`` is the canonical lower-case name (Slurm GRES type / feature)."""

    key: str
    name: str
    generation: str
    compute_capability: float
    memory_gb: float
    mem_bw_gbs: float
    sms: int
    fp32_tflops: float
    fp16_tflops: float
    tensor_tflops: float
    aliases: tuple[str, ...] = ()
    source: str = ""

    @property
    def generation_index(self) -> int:
        """0 for Kepler, 1 for Pascal, ... (an ordinal feature)."""
        return GENERATIONS.index(self.generation)

    @property
    def has_bf16(self) -> bool:
        """Whether the GPU computes bf16 natively (tensor cores from compute capability 8.0,
        Ampere, on; the catalog's compute_capability says so per type). V100, T4, P100, K80 do
        not: a bf16 job there runs at FP32 speed at best."""
        return self.compute_capability >= BF16_MIN_CC

    @property
    def has_tf32(self) -> bool:
        """Whether the GPU has TF32 tensor cores (Ampere and later)."""
        return self.generation_index >= GENERATIONS.index("ampere")

    def peak_tflops(self, precision: str) -> float:
        """Peak dense TFLOPS a framework can reach at this precision (tensor cores when usable);
        tf32 and bf16 fall back to FP32 on GPUs without them."""
        if precision in ("fp16", "int8") or (precision == "bf16" and self.has_bf16):
            return max(self.tensor_tflops, self.fp16_tflops, self.fp32_tflops)
        if precision == "tf32" and self.has_tf32:
            return max(self.tensor_tflops / 2, self.fp32_tflops)
        return self.fp32_tflops


def normalize(name: str) -> str:
    """Lower-case, alphanumerics only, vendor prefixes and 'CTS' suffix removed."""
    low = name.lower()
    text = low if "mig" in low else re.sub(r"\(.*?\)", "", low)
    words = re.sub(r"[^a-z0-9]", " ", text).split()
    while words and words[0] in _PREFIXES:
        words = words[1:]
    while words and words[-1] in _SUFFIXES:
        words = words[:-1]
    return "".join(words)


@lru_cache(maxsize=1)
def catalog() -> dict[str, GpuSpec]:
    """All GPU types shipped in slurm_hase/data/gpu_catalog.csv, by key."""
    try:
        text = (DATA_DIR / "gpu_catalog.csv").read_text(encoding="utf-8")
    except OSError as exc:  # pragma: no cover - broken install
        raise PredictorError(f"GPU catalog missing from the package: {exc}") from None
    out: dict[str, GpuSpec] = {}
    import csv  # lazy: hsbatch start-up

    for row in csv.DictReader(text.splitlines()):
        out[row["key"]] = GpuSpec(
            key=row["key"],
            name=row["name"],
            generation=row["generation"],
            compute_capability=float(row["compute_capability"]),
            memory_gb=float(row["memory_gb"]),
            mem_bw_gbs=float(row["mem_bw_gbs"]),
            sms=int(row["sms"]),
            fp32_tflops=float(row["fp32_tflops"]),
            fp16_tflops=float(row["fp16_tflops"]),
            tensor_tflops=float(row["tensor_tflops"]),
            aliases=tuple(a for a in row["aliases"].split(";") if a),
            source=row["source"],
        )
    return out


@lru_cache(maxsize=1)
def _alias_index() -> dict[str, str]:
    index: dict[str, str] = {}
    for spec in catalog().values():
        for alias in (spec.key, spec.name, *spec.aliases):
            index.setdefault(normalize(alias), spec.key)
    return index


def resolve_gpu(name: str) -> GpuSpec:
    """The catalog entry for any common spelling; UnknownGpuError lists close matches."""
    if not isinstance(name, str) or not name.strip() or len(name) > 200:
        raise UnknownGpuError(str(name)[:200], [])
    from slurm_hase.predict.mig import is_mig_name, mig_spec  # lazy: mig imports this module

    if is_mig_name(name):
        return mig_spec(name.strip().lower())
    norm = normalize(name)
    key = _alias_index().get(norm)
    if key is None and norm.endswith("gb"):
        key = _strip_memory(norm)
    if key is None:
        raise UnknownGpuError(name, close_matches(name))
    return catalog()[key]


def _strip_memory(norm: str) -> str | None:
    """The key of a normalised name with its memory size appended (``h10080gb``, ``l424gb``):
    the type whose catalog memory is that size, else the type left once every trailing digit is
    stripped (``v100s32gb``); None when neither is a type. Where the type's own name ends in a
    digit the split is ambiguous, so each split is tried against the catalog's memory size."""
    index, cat = _alias_index(), catalog()
    digits = re.search(r"\d+gb$", norm)
    if digits is None:
        return None
    start, end = digits.start(), len(norm) - 2
    for cut in range(end - 1, start - 1, -1):  # shortest memory figure first: "l4"+"24gb"
        key = index.get(norm[:cut])
        if key is not None and cat[key].memory_gb == float(norm[cut:end]):
            return key
    return index.get(norm[:start])


def close_matches(name: str, n: int = 4) -> list[str]:
    """Catalog keys whose spellings look like ``name``."""
    index = _alias_index()
    norm = normalize(name)
    import difflib  # lazy: only for error messages

    hits = difflib.get_close_matches(norm, list(index), n=3 * n, cutoff=0.5)
    keys: list[str] = []
    for h in hits:
        if index[h] not in keys:
            keys.append(index[h])
    if not keys and norm:
        keys = [k for k in catalog() if norm in k or k in norm]
    return keys[:n]


def gpu_keys() -> list[str]:
    """All canonical keys, in catalog order."""
    return list(catalog())
