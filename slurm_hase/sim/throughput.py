"""Measured per-type speeds and co-location interference (Gavel's throughput table).

``simulation_throughputs.json`` (stanford-futuredata/gavel, MIT) gives, for each GPU type
(k80, p100, v100) and each (job type, scale factor), the isolated steps/s under ``"null"`` and,
for every other (job type, 1) it was co-located with on one GPU, ``[self, other]`` steps/s.

Mapping used by the simulator (documented in docs of ``hase simulate``):

* a job's *reference runtime* (the trace duration) is its runtime on ``REFERENCE_TYPE`` (v100),
  as in Gavel's own trace generator; on type k it runs ``ref * tput[v100] / tput[k]``;
* the scale factor is the largest of 1/2/4/8 not above the job's GPU count that the table has;
* MPS interference of job a sharing a GPU with b on type k: its speed is multiplied by
  ``self_tput(a|b) / isolated(a)``; with several neighbours the worst pair counts.
"""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from slurm_hase.errors import DataError

REFERENCE_TYPE = "v100"
SCALE_FACTORS = (1, 2, 4, 8)


@dataclass(frozen=True)
class ThroughputTable:
    """Isolated steps/s and co-located steps/s per GPU type."""

    isolated: Mapping[str, Mapping[tuple[str, int], float]]
    # type -> (job type a) -> (job type b) -> a's steps/s when sharing one GPU with b (sf = 1)
    colocated: Mapping[str, Mapping[str, Mapping[str, float]]]
    # types whose speeds are predicted, not measured (sim/predicted.py; () = all measured)
    predicted: tuple[str, ...] = ()

    @property
    def gpu_types(self) -> tuple[str, ...]:
        return tuple(sorted(self.isolated))

    def job_types(self, scale_factor: int = 1) -> list[str]:
        """Job types measured at `scale_factor` on every GPU type, sorted."""
        sets = [{jt for (jt, sf) in table if sf == scale_factor} for table in self.isolated.values()]
        return sorted(set.intersection(*sets)) if sets else []

    def scale_factor(self, job_type: str, num_gpus: int) -> int:
        """Largest measured scale factor <= num_gpus for this job type (at least 1)."""
        best = 1
        ref = self.isolated.get(REFERENCE_TYPE) or next(iter(self.isolated.values()))
        for sf in SCALE_FACTORS:
            if sf <= max(num_gpus, 1) and (job_type, sf) in ref:
                best = sf
        return best

    def runtimes(self, job_type: str, num_gpus: int, ref_runtime_s: float,
                 gpu_types: tuple[str, ...]) -> dict[str, float]:
        """Runtime on each type in `gpu_types` for a job of `ref_runtime_s` on the reference."""
        sf = self.scale_factor(job_type, num_gpus)
        ref = self.isolated[REFERENCE_TYPE][(job_type, sf)]
        out: dict[str, float] = {}
        for t in gpu_types:
            tput = self.isolated.get(t, {}).get((job_type, sf), 0.0)
            out[t] = ref_runtime_s * ref / tput if tput > 0 else math.inf
        return out

    def relative_speed(self, gpu_type: str) -> float:
        """Median over measured job types of (steps/s on gpu_type) / (steps/s on v100)."""
        ref = self.isolated[REFERENCE_TYPE]
        own = self.isolated.get(gpu_type, {})
        ratios = sorted(own[k] / ref[k] for k in own if k in ref and ref[k] > 0 and own[k] > 0)
        return ratios[len(ratios) // 2] if ratios else 0.0

    def pair_factor(self, gpu_type: str, job_type: str, other: str) -> float:
        """Speed factor (0..1] of `job_type` while sharing a GPU of `gpu_type` with `other`."""
        iso = self.isolated.get(gpu_type, {}).get((job_type, 1), 0.0)
        shared = self.colocated.get(gpu_type, {}).get(job_type, {}).get(other, 0.0)
        if iso <= 0 or shared <= 0:
            return 1.0
        return min(shared / iso, 1.0)

    def mean_slowdown(self, gpu_type: str, job_type: str) -> float:
        """Expected runtime multiplier (>= 1) when sharing with a random neighbour."""
        row = self.colocated.get(gpu_type, {}).get(job_type, {})
        factors = [self.pair_factor(gpu_type, job_type, o) for o in row]
        factors = [f for f in factors if f > 0]
        if not factors:
            return 1.0
        return max(1.0, len(factors) / sum(factors))


def load_throughputs(path: Path) -> ThroughputTable:
    """Parse Gavel's throughput JSON; DataError naming the key on a bad entry."""
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: cannot read throughput table: {exc}") from None
    if not isinstance(raw, dict):
        raise DataError(f"{path}: not a JSON object")
    isolated: dict[str, dict[tuple[str, int], float]] = {}
    coloc: dict[str, dict[str, dict[str, float]]] = {}
    for gpu, table in raw.items():
        if "_" in gpu or not isinstance(table, dict):
            continue  # *_unconsolidated variants are not used
        iso = isolated.setdefault(gpu, {})
        col = coloc.setdefault(gpu, {})
        for key, entry in table.items():
            jt, sf = _parse_key(path, gpu, key)
            try:
                iso[(jt, sf)] = float(entry["null"])
            except (KeyError, TypeError, ValueError):
                raise DataError(f"{path}: {gpu} {key}: missing isolated 'null' throughput") from None
            if sf != 1:
                continue
            for other_key, pair in entry.items():
                if other_key == "null":
                    continue
                ojt, osf = _parse_key(path, gpu, other_key)
                if osf == 1 and isinstance(pair, list) and pair:
                    col.setdefault(jt, {})[ojt] = float(pair[0])
    if REFERENCE_TYPE not in isolated:
        raise DataError(f"{path}: no {REFERENCE_TYPE} table (reference type)")
    return ThroughputTable(isolated=isolated, colocated=coloc)


def _parse_key(path: Path, gpu: str, key: str) -> tuple[str, int]:
    try:
        value = ast.literal_eval(key)
        jt, sf = str(value[0]), int(value[1])
    except (ValueError, SyntaxError, TypeError, IndexError):
        raise DataError(f"{path}: {gpu}: bad job key {key!r}") from None
    return jt, sf
