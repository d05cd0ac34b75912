"""Pair memory: what a measured MPS pairing tells about its other side.

When job A shares a GPU with job B, much of the interference belongs to the pair, not to A or B
alone: where the model under-predicts B's time beside A, it under-predicts A's time beside B too
(Gavel's V100 rows: after per-job and per-co-runner levels, the two residuals of a pair correlate
0.70; K80 0.45, P100 0.26). So for a query "A beside B on GPU g" whose mirror row "B beside A on g"
is in the training data, the log P50 moves by beta_g x the mirror's out-of-fold log residual
(log(measured / predicted), from inner folds of the training rows). beta_g is fitted by least
squares through the origin over the training pairs where both sides have a residual, clipped to
[0, 1]; a GPU type with fewer than MIN_PAIRS such pairs gets none. Only single-GPU jobs with
exactly one co-runner take part; a job beside a copy of itself is its own mirror and is skipped.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from slurm_hase.errors import PredictorError

if TYPE_CHECKING:
    from slurm_hase.predict.descriptor import WorkloadDescriptor

MIN_PAIRS = 10
PairKey = str


def pair_key(gpu_key: str, own_gflops: float | None, corunner_gflops: Sequence[float],
             num_gpus: int) -> PairKey | None:
    """The key of "this job beside its one co-runner on gpu_key"; None when the query does not
    take part (not one co-runner, more than one GPU, unknown GFLOPs, or a copy of itself)."""
    if num_gpus != 1 or len(corunner_gflops) != 1 or not own_gflops:
        return None
    own, other = f"{own_gflops:.6g}", f"{corunner_gflops[0]:.6g}"
    if own == other:
        return None
    return f"{gpu_key}|{own}|{other}"


def mirror(key: PairKey) -> PairKey:
    """The same pairing seen from the co-runner's side."""
    gpu, own, other = key.split("|")
    return f"{gpu}|{other}|{own}"


@dataclass(frozen=True)
class PairMemory:
    """Per GPU type the weight beta, per pairing its out-of-fold log residual (module docstring)."""

    beta: dict[str, float] = field(default_factory=dict)
    residuals: dict[PairKey, float] = field(default_factory=dict)

    def shift(self, key: PairKey | None) -> float:
        """What to add to the log P50 of the query with this pair key (0 without a mirror)."""
        if key is None:
            return 0.0
        b = self.beta.get(key.partition("|")[0], 0.0)
        if b <= 0.0:
            return 0.0
        r = self.residuals.get(mirror(key))
        return 0.0 if r is None else b * r

    def as_dict(self) -> dict[str, Any]:
        """The model file's ``pairs`` section."""
        return {"beta": self.beta, "residuals": self.residuals}

    @classmethod
    def from_dict(cls, doc: Any) -> PairMemory:
        """Parse and check a ``pairs`` section; PredictorError naming what is wrong."""
        if not isinstance(doc, Mapping):
            raise PredictorError("bad pairs section")
        beta, resid = doc.get("beta"), doc.get("residuals")
        if not isinstance(beta, Mapping) or not isinstance(resid, Mapping):
            raise PredictorError("pairs section needs 'beta' and 'residuals' objects")
        for gpu, b in beta.items():
            if not isinstance(b, (int, float)) or isinstance(b, bool) or not 0.0 <= b <= 1.0:
                raise PredictorError(f"pairs: beta of {gpu!r} must be a number in [0, 1], got {b!r}")
        for key, r in resid.items():
            if not isinstance(key, str) or key.count("|") != 2:
                raise PredictorError(f"pairs: bad pair key {key!r} (want 'gpu|gflops|corunner_gflops')")
            if not isinstance(r, (int, float)) or isinstance(r, bool) or not math.isfinite(r):
                raise PredictorError(f"pairs: residual of {key!r} must be a finite number, got {r!r}")
        return cls({str(g): float(b) for g, b in beta.items()},
                   {str(k): float(r) for k, r in resid.items()})


def fit_pairs(keys: Sequence[PairKey | None], residuals: Sequence[float | None]) -> PairMemory | None:
    """The pair memory of training rows (their pair keys and out-of-fold log residuals, None where
    a row has none); None when no GPU type has MIN_PAIRS mirrored pairs."""
    by_key = {k: r for k, r in zip(keys, residuals, strict=True) if k is not None and r is not None}
    sums: dict[str, list[float]] = {}  # gpu -> [sum x*y, sum x*x, pairs]
    for k, y in by_key.items():
        x = by_key.get(mirror(k))
        if x is None:
            continue
        s = sums.setdefault(k.partition("|")[0], [0.0, 0.0, 0.0])
        s[0] += x * y
        s[1] += x * x
        s[2] += 1
    beta = {g: min(1.0, max(0.0, sxy / sxx)) for g, (sxy, sxx, n) in sorted(sums.items())
            if n >= MIN_PAIRS and sxx > 0}
    beta = {g: round(b, 6) for g, b in beta.items() if b > 0}
    if not beta:
        return None
    kept = {k: round(r, 6) for k, r in sorted(by_key.items()) if k.partition("|")[0] in beta}
    return PairMemory(beta, kept)


def query_shift(memory: PairMemory | None, gpu_key: str, desc: WorkloadDescriptor) -> float:
    """``memory.shift`` for a job on `gpu_key` (its GFLOPs per iteration from the model table, at
    its batch size and mode, when the descriptor has none); 0 without a memory or when the job
    does not take part."""
    if memory is None or desc.num_gpus != 1 or len(desc.corunner_gflops) != 1:
        return 0.0
    own = desc.gflops_per_iter
    if not own:
        from slurm_hase.predict.models import fill

        own = fill(desc).gflops
    return memory.shift(pair_key(gpu_key, own, desc.corunner_gflops, desc.num_gpus))
