"""RuntimeEstimator that reads a job's workload descriptor from its comment and re-predicts.

Only the descriptor (model, batch size, iterations...) comes from the user; runtimes always come
from the predictor. A malformed or hostile comment makes the job unknown (None, logged once)
and the text is never passed to anything but the JSON parser. Results are cached per
(job id, comment, GPU types, GPU request, time limit), so a cycle over thousands of unchanged
jobs predicts nothing new. A job that asks for an MPS share also gets its slowdown per type
beside a copy of itself (JobEstimate.mps_slowdown), as the policies price a shared GPU by it.
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Protocol

from slurm_hase.daemon.state import JobEstimate
from slurm_hase.errors import DescriptorError, HaseError
from slurm_hase.predict.descriptor import WorkloadDescriptor
from slurm_hase.slurm.types import GpuRequest, Job

log = logging.getLogger("slurm_hase.daemon.estimator")

NOMINAL_RUNTIME_S = 3600.0  # slowest-type runtime assumed when neither iterations nor limit known


class PredictionLike(Protocol):
    """The parts of predict.api.Prediction used here."""

    @property
    def iter_time_p50(self) -> float: ...

    @property
    def runtime_p50_s(self) -> float | None: ...


class PredictorLike(Protocol):
    """The parts of predict.api.Predictor used here."""

    def predict(self, desc: WorkloadDescriptor,
                gpu_types: Sequence[str]) -> Mapping[str, PredictionLike]: ...

    def mps_slowdown(self, desc: WorkloadDescriptor, corunners: Sequence[WorkloadDescriptor],
                     gpu_type: str) -> float: ...


TypeResolver = Callable[[str], str]


def catalog_key(name: str) -> str:
    """Canonical catalog key of a Slurm GPU type name (raises UnknownGpuError)."""
    from slurm_hase.predict.catalog import resolve_gpu

    return resolve_gpu(name).key


# (job id, comment, GPU types, GPU request, time limit): the estimate depends on each (a
# description without gpus= is for the GPUs asked; without iterations, runtimes scale to the limit)
_Key = tuple[str, str, tuple[str, ...], GpuRequest | None, int | None]


class DescriptorEstimator:
    """Estimates from the `{"hase":1,...}` descriptor in the job comment."""

    repeatable = True  # one answer per _Key while the predictor is the same

    def __init__(self, predictor: PredictorLike, *, resolve: TypeResolver = catalog_key,
                 max_cache: int = 50_000) -> None:
        self.predictor = predictor
        self.resolve = resolve
        self.max_cache = max_cache
        self._cache: OrderedDict[_Key, JobEstimate | None] = OrderedDict()
        self._keys: dict[str, str | None] = {}
        self.rejected: dict[str, str] = {}  # job id -> reason of the latest rejection

    def estimate(self, job: Job, gpu_types: Sequence[str]) -> JobEstimate | None:
        """Predicted runtime per type, or None when the job carries no usable descriptor."""
        key: _Key = (job.job_id, job.comment, tuple(gpu_types), job.gpu, job.time_limit_s)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        est = self._compute(job, gpu_types)
        self._cache[key] = est
        if len(self._cache) > self.max_cache:
            self._cache.popitem(last=False)
        return est

    def _reject(self, job: Job, reason: str) -> None:
        self.rejected[job.job_id] = reason
        log.warning("job %s: descriptor ignored: %s", job.job_id, reason)

    def _type_key(self, gtype: str) -> str | None:
        if gtype not in self._keys:
            try:
                self._keys[gtype] = self.resolve(gtype)
            except HaseError as exc:
                log.warning("GPU type %r unknown to the predictor: %s", gtype, exc)
                self._keys[gtype] = None
        return self._keys[gtype]

    def _compute(self, job: Job, gpu_types: Sequence[str]) -> JobEstimate | None:
        try:
            desc = WorkloadDescriptor.from_comment(job.comment)
        except DescriptorError as exc:
            self._reject(job, str(exc))
            return None
        except Exception as exc:  # noqa: BLE001 - hostile input must never crash a cycle
            self._reject(job, f"unparseable comment ({type(exc).__name__})")
            return None
        if desc is None:
            return None
        gpu = job.gpu
        if desc.num_gpus == 1 and gpu is not None and not gpu.mps and gpu.count > 1:
            # a description without gpus= (older hsbatch, or a comment written by hand) is for
            # the GPUs the job asks for (per node: one node assumed, squeue has no node count)
            desc = replace(desc, num_gpus=gpu.count)
        keyed = {t: k for t in gpu_types if (k := self._type_key(t)) is not None}
        if not keyed:
            return None
        try:
            preds = self.predictor.predict(desc, sorted(set(keyed.values())))
        except HaseError as exc:
            self._reject(job, f"prediction failed: {exc}")
            return None
        iters: dict[str, float] = {}
        runtimes: dict[str, float] = {}
        for t, k in keyed.items():
            p = preds.get(k)
            if p is None or not p.iter_time_p50 > 0:
                continue
            iters[t] = float(p.iter_time_p50)
            if p.runtime_p50_s is not None and p.runtime_p50_s > 0:
                runtimes[t] = float(p.runtime_p50_s)
        if not iters:
            return None
        if len(runtimes) != len(iters):
            runtimes = _scaled_runtimes(iters, job.time_limit_s)
        slowdown = self._mps_slowdown(job, desc, {t: keyed[t] for t in runtimes})
        return JobEstimate(runtime_s=runtimes, mps_slowdown=slowdown, checkpoint=desc.checkpoint,
                           may_share=desc.may_share)

    def _mps_slowdown(self, job: Job, desc: WorkloadDescriptor,
                      keyed: Mapping[str, str]) -> dict[str, float]:
        """Per type, the job's slowdown on a GPU shared through MPS, for a job that asks for a
        share (gres/mps or mps= in its description) or may be given one (share=yes); {} for
        any other. Its co-runner is taken to be a copy of itself (the policy does not know who
        it will share with)."""
        gpu = job.gpu
        if not ((gpu is not None and gpu.mps > 0) or desc.may_share
                or (desc.mps_share is not None and desc.mps_share < 100)):
            return {}
        alone = desc.with_corunners(())
        by_key: dict[str, float] = {}  # one prediction per catalog key (aliases share one)
        for k in set(keyed.values()):
            try:
                factor = float(self.predictor.mps_slowdown(alone, [alone], k))
            except HaseError as exc:
                log.warning("job %s: no MPS slowdown on %s: %s", job.job_id, k, exc)
                continue
            if math.isfinite(factor) and factor >= 1.0:
                by_key[k] = factor
        return {t: by_key[k] for t, k in keyed.items() if k in by_key}


def _scaled_runtimes(iters: Mapping[str, float], limit_s: int | None) -> dict[str, float]:
    """Without iterations: the slowest type takes the time limit (or a nominal hour)."""
    slowest = max(iters.values())
    span = float(limit_s) if limit_s else NOMINAL_RUNTIME_S
    return {t: span * it / slowest for t, it in iters.items()}
