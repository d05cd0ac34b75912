"""The predictor API the scheduler, hsbatch and the simulator use.

Importing this module and predicting one job touches neither numpy nor LightGBM: the saved trees
are walked in pure Python. ``predict_many`` uses LightGBM (or numpy) for bulk work.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from slurm_hase.predict import bound
from slurm_hase.predict import features as F
from slurm_hase.predict.catalog import GpuSpec, resolve_gpu
from slurm_hase.predict.completion import (
    Completion,
    column_key,
    context_key,
    is_multi,
    pooled_key,
    workload_key,
)
from slurm_hase.predict.descriptor import WorkloadDescriptor
from slurm_hase.predict.features import matrix_of
from slurm_hase.predict.fieldcheck import check_fields
from slurm_hase.predict.forest import (
    Tree,
    parse_lgb_text,
    predict_np,
    predict_one,
)
from slurm_hase.predict.keys import knowledge_level, model_key
from slurm_hase.predict.pairs import PairMemory, query_shift

if TYPE_CHECKING:
    import numpy as np



def regime(desc: WorkloadDescriptor) -> str:
    """A workload's numeric regime, e.g. "fp16/train" (models record the ones they saw)."""
    return f"{desc.precision}/{desc.mode}"


def _signature(spec: GpuSpec) -> tuple[Any, ...]:
    """The catalog figures the model sees (two types with equal signatures are the same chip)."""
    return (spec.generation, spec.compute_capability, spec.memory_gb, spec.mem_bw_gbs, spec.sms,
            spec.fp32_tflops, spec.fp16_tflops, spec.tensor_tflops)


@dataclass(frozen=True)
class Prediction:
    """Predicted iteration time (s) of one job on one GPU type; runtime when iterations known."""

    gpu_type: str
    iter_time_p50: float
    iter_time_p90: float
    runtime_p50_s: float | None
    runtime_p90_s: float | None


@dataclass
class Predictor:
    """A trained model: LightGBM text per quantile plus metadata."""

    boosters: dict[str, str]
    meta: dict[str, Any] = field(default_factory=dict)
    # P50 multiplier per knowledge level (MAPE-optimal point estimate; 1.0 when absent) and the
    # GPU types each model of the training data was measured on (model key -> GPU keys).
    factors: dict[str, float] = field(default_factory=dict)
    known: dict[str, list[str]] = field(default_factory=dict)
    # Collaborative-filtering completion of known workloads, blended into the P50 (``completion``):
    # single-GPU queries use ``completion``, multi-GPU ones the pooled ``completion_multi``.
    completion: Completion | None = None
    completion_multi: Completion | None = None
    # Measured pairings' out-of-fold residuals, carried to their mirror query (pairs.py).
    pairs: PairMemory | None = None
    # The physical floor's scale per (model key, mode) the training data measured (bound.py);
    # None: a file from before the floor, which floors only models it has no measurements of.
    floor_scales: dict[str, float] | None = None
    _known_gpus: frozenset[str] = field(default=frozenset(), repr=False)
    _cf_models: frozenset[str] = field(default=frozenset(), repr=False)  # model keys the completion knows
    _trees: dict[str, list[Tree]] = field(default_factory=dict, repr=False)
    _bulk: dict[str, Any] = field(default_factory=dict, repr=False)
    _twins: dict[tuple[Any, ...], str] | None = field(default=None, repr=False)
    compute_weight: float = field(default=1.0, init=False)  # the roofline of the targets (features.base_of)

    def __post_init__(self) -> None:
        self.compute_weight, self.floor_scales = check_fields(
            self.boosters, self.factors, self.meta, self.floor_scales)
        for q in self.boosters:
            if q not in self._trees:
                self._trees[q] = parse_lgb_text(self.boosters[q])
        self._known_gpus = frozenset(g for gs in self.known.values() for g in gs)
        self._cf_models = frozenset(k.partition("|")[0] for c in (self.completion, self.completion_multi)
                                    if c is not None for k in c.rows)

    def twin(self, spec: GpuSpec) -> GpuSpec:
        """A GPU type without training data whose catalog figures equal a measured type's (A100
        PCIe 40 GB beside A100 SXM 40 GB) is predicted as that type, so identical hardware gets
        identical predictions; any other spec is returned as it is."""
        if spec.key in self._known_gpus:
            return spec
        if self._twins is None:
            self._twins = {_signature(resolve_gpu(g)): g for g in sorted(self._known_gpus)}
        measured = self._twins.get(_signature(spec))
        return spec if measured is None else resolve_gpu(measured)

    def extrapolation(self, desc: WorkloadDescriptor) -> str | None:
        """Why a prediction for `desc` is an extrapolation beyond the training data, or None
        (models trained before regimes were recorded never say)."""
        why = []
        seen = self.meta.get("regimes")
        if isinstance(seen, list) and regime(desc) not in seen:
            why.append(f"no {desc.precision} {desc.mode} measurements (it has {', '.join(seen)})")
        if self.known and model_key(desc) not in self.known:
            why.append(f"no measurements of {desc.model or 'this workload'} (predicted from its "
                       "FLOPs and size)")
        if not why:
            return None
        return f"the model has {' and '.join(why)}: this prediction is an extrapolation"

    # ---- calibration ----------------------------------------------------------------------
    def level(self, model_key: str, gpu_key: str) -> str:
        """How much the training data knew about this model on this GPU type (see LEVELS)."""
        return knowledge_level(self.known, self._known_gpus, model_key, gpu_key)

    def unseen(self, model_key: str) -> bool:
        """True when this model was not in the training data and the file has an unseen-model P50."""
        return "p50_unseen" in self._trees and model_key not in self.known

    def factor(self, model_key: str, gpu_key: str) -> float:
        """The P50 multiplier for a (model key, GPU key) query."""
        if not self.factors:
            return 1.0
        return float(self.factors.get(self.level(model_key, gpu_key), 1.0))

    # ---- the physical floor (bound.py) ----------------------------------------------------
    def floor_scale(self, model_key: str, mode: str) -> float:
        """The floor's scale for a (model key, mode): what the training data measured (the lowest
        measured / floor ratio), 1 for a workload it never measured in this mode (the
        descriptor's FLOPs and weights are all there is); 0 (no floor) for a model measured by a
        model file from before the floor, which does not say."""
        if self.floor_scales is None:
            return 0.0 if model_key in self.known else 1.0
        return self.floor_scales.get(bound.floor_key(model_key, mode), 1.0)

    def floor(self, job: Sequence[float], spec: GpuSpec, precision: str, model_key: str, mode: str) -> float:
        """The least iteration time (s) a prediction may give: ``floor_scale`` x
        ``bound.floor_seconds`` (``job``: ``features.job_vector`` of the workload)."""
        scale = self.floor_scale(model_key, mode)
        return scale * bound.floor_seconds(job, precision, spec) if scale > 0.0 else 0.0

    def floor_rows(self, rows: Sequence[Any]) -> list[float]:
        """``floor`` of each measured row (``dataset.Measurement``: its descriptor on its GPU)."""
        return [self.floor(F.job_vector(m.desc), resolve_gpu(m.gpu), m.desc.precision, model_key(m.desc),
                           m.desc.mode) for m in rows]

    # ---- completion -----------------------------------------------------------------------
    def _comp(self, num_gpus: int) -> Completion | None:
        """The completion that answers a job on this many GPUs (pooled for more than one)."""
        return self.completion if num_gpus == 1 else self.completion_multi

    def cf_row(self, desc: WorkloadDescriptor, mkey: str) -> str | None:
        """The completion's row key of a workload (the pooled matrix's for a multi-GPU job), or None
        when that completion does not know it."""
        comp = self._comp(desc.num_gpus)
        if comp is None or mkey not in self._cf_models:
            return None
        from slurm_hase.predict.models import fill

        bs = desc.batch_size or fill(desc).batch_size
        key = (workload_key if desc.num_gpus == 1 else pooled_key)(mkey, desc, bs)
        return key if key in comp.rows else None

    def cf_shift(self, wkey: str | None, context: str, mkey: str, gpu_key: str, s50: float) -> float:
        """What the completion adds to the trees' log P50 (``s50``) for this query (0 without support):
        ``w * clip(completion - s50)``, w the blend weight of the query's knowledge level and row
        density (``Completion.shift``). ``context``: ``completion.context_key`` of the job."""
        comp = self.completion_multi if is_multi(context) else self.completion
        if comp is None or wkey is None:
            return 0.0
        return comp.shift(wkey, column_key(gpu_key, context), self.level(mkey, gpu_key), s50)

    def cf_shifts(
        self, wkeys: Sequence[str | None], contexts: Sequence[str], mkeys: Sequence[str],
        gpu_keys: Sequence[str], s50: np.ndarray[Any, Any],
    ) -> np.ndarray[Any, Any]:
        """``cf_shift`` for every (row, GPU type) of a [n, k] matrix of tree scores."""
        import numpy as np

        out = np.zeros(s50.shape)
        if self.completion is None and self.completion_multi is None:
            return out
        for i, wk in enumerate(wkeys):
            if wk is not None:
                out[i] = [self.cf_shift(wk, contexts[i], mkeys[i], g, float(s50[i, j]))
                          for j, g in enumerate(gpu_keys)]
        return out

    # ---- single predictions (pure Python) -------------------------------------------------
    def predict(self, desc: WorkloadDescriptor, gpu_types: Sequence[str]) -> dict[str, Prediction]:
        """P50/P90 iteration time (and runtime if ``desc.iterations``) per GPU type."""
        out: dict[str, Prediction] = {}
        job = F.job_vector(desc)
        mkey = model_key(desc)
        wkey = self.cf_row(desc, mkey)
        cf = (wkey, context_key(desc.corunner_gflops, desc.num_gpus), mkey) if wkey is not None else None
        for name in gpu_types:
            spec = resolve_gpu(name)
            look = self.twin(spec)
            p50, p90 = self._one(job, look, desc.precision, self.unseen(mkey), cf, desc)
            p50 *= self.factor(mkey, look.key)
            p90 = max(p90, p50)  # a quantile above the median, calibration included
            # never faster than the GPU could possibly run it; the P90 moves with the P50
            lift = max(1.0, self.floor(job, spec, desc.precision, mkey, desc.mode) / p50)
            p50, p90 = p50 * lift, p90 * lift
            it = desc.iterations
            out[name] = Prediction(
                gpu_type=spec.key,
                iter_time_p50=p50,
                iter_time_p90=p90,
                runtime_p50_s=p50 * it if it else None,
                runtime_p90_s=p90 * it if it else None,
            )
        return out

    def predict_known(
        self, desc: WorkloadDescriptor, gpu_types: Sequence[str]
    ) -> dict[str, Prediction]:
        """``predict`` for the types the GPU catalog resolves; the others get no entry."""
        from slurm_hase.errors import UnknownGpuError

        known: list[str] = []
        for name in gpu_types:
            try:
                resolve_gpu(name)
            except UnknownGpuError:
                continue
            known.append(name)
        return self.predict(desc, known)

    def _one(
        self, job: list[float], spec: GpuSpec, precision: str, unseen: bool = False,
        cf: tuple[str | None, str, str] | None = None, desc: WorkloadDescriptor | None = None,
    ) -> tuple[float, float]:
        """(P50, P90) of one job row; ``cf``: (workload key, context key, model key) to blend in the
        completion, ``desc``: the job, for the pair memory (the P90 moves with the P50)."""
        gpu = F.gpu_vector(spec, precision)
        c, w = F.cross(job, gpu, precision)
        x = [*job, *gpu, c, w]
        base = F.base_of(c, gpu[0], gpu[1], self.compute_weight)
        s50 = predict_one(self._trees["p50_unseen" if unseen else "p50"], x)
        if cf is not None:
            s50 += self.cf_shift(cf[0], cf[1], cf[2], spec.key, s50)
        if desc is not None and self.pairs is not None:
            s50 += query_shift(self.pairs, spec.key, desc)
        p50 = math.exp(base + s50)
        p90 = math.exp(base + s50 + predict_one(self._trees["p90"], x))
        return p50, max(p50, p90)

    def mps_slowdown(
        self, desc: WorkloadDescriptor, corunners: Sequence[WorkloadDescriptor], gpu_type: str
    ) -> float:
        """Iteration-time multiplier (>= 1) when sharing ``gpu_type`` through MPS."""
        if not corunners:
            return 1.0
        from slurm_hase.predict.models import fill

        spec = resolve_gpu(gpu_type)
        co = tuple(fill(c).gflops for c in corunners)
        mkey = model_key(desc)
        unseen = self.unseen(mkey)
        # the completion only when it knows both the exclusive and the shared entry (one estimator
        # for the ratio)
        wkey = self.cf_row(desc, mkey)
        comp = self._comp(desc.num_gpus)
        ctx = (context_key((), desc.num_gpus), context_key(co, desc.num_gpus))
        cf_alone = cf_shared = None
        if wkey is not None and comp is not None and all(column_key(spec.key, k) in comp.cols for k in ctx):
            cf_alone, cf_shared = (wkey, ctx[0], mkey), (wkey, ctx[1], mkey)
        job = F.job_vector(desc.with_corunners(()))
        least = self.floor(job, spec, desc.precision, mkey, desc.mode)  # the co-runners' work aside
        alone = max(least, self._one(job, spec, desc.precision, unseen, cf_alone)[0])
        with_co = desc.with_corunners(co)
        shared = max(least, self._one(F.job_vector(with_co), spec, desc.precision, unseen, cf_shared, with_co)[0])
        return max(1.0, shared / alone)

    # ---- bulk predictions (numpy / LightGBM) ----------------------------------------------
    def predict_many(
        self, descs: Sequence[WorkloadDescriptor], gpu_types: Sequence[str]
    ) -> np.ndarray[Any, Any]:
        """[n, k] array of P50 iteration times (seconds)."""
        return self.predict_many_q(descs, gpu_types, "p50")

    def predict_many_q(
        self, descs: Sequence[WorkloadDescriptor], gpu_types: Sequence[str], q: str
    ) -> np.ndarray[Any, Any]:
        """[n, k] array of iteration times at quantile ``q`` ("p50" or "p90").

        Identical workloads are evaluated once (job traces repeat model/batch combinations)."""
        import numpy as np

        specs = [self.twin(resolve_gpu(g)) for g in gpu_types]
        n, k = len(descs), len(specs)
        if n == 0 or k == 0:
            return np.zeros((n, k))
        uniq: dict[tuple[tuple[float, ...], str, str, tuple[float, ...]], int] = {}
        first: list[WorkloadDescriptor] = []
        inverse: list[int] = []
        for d in descs:
            key = (tuple(F.job_vector(d)), d.precision, model_key(d), d.corunner_gflops)
            if key not in uniq:
                uniq[key] = len(uniq)
                first.append(d)
            inverse.append(uniq[key])
        mkeys = [m for _j, _p, m, _c in uniq]
        x, base = matrix_of([(j, p) for j, p, _m, _c in uniq], specs, self.compute_weight)
        new = np.repeat(np.asarray([self.unseen(m) for m in mkeys], dtype=bool), k)
        scores = self.raw_scores(x, new)
        if self.completion is not None or self.completion_multi is not None:
            gkeys = [s.key for s in specs]
            wkeys = [self.cf_row(d, m) for d, m in zip(first, mkeys, strict=True)]
            ctxs = [context_key(d.corunner_gflops, d.num_gpus) if w is not None else ""
                    for d, w in zip(first, wkeys, strict=True)]
            scores = scores + self.cf_shifts(wkeys, ctxs, mkeys,
                                             gkeys, scores.reshape(len(uniq), k)).reshape(-1)
        paired = ([(u, d) for u, d in enumerate(first) if len(d.corunner_gflops) == 1 and d.num_gpus == 1]
                  if self.pairs is not None else [])
        if paired:
            pair_shift = np.zeros((len(uniq), k))
            for u, d in paired:
                pair_shift[u] = [query_shift(self.pairs, s.key, d) for s in specs]
            scores = scores + pair_shift.reshape(-1)
        p50 = np.exp(base + scores).reshape(len(uniq), k)
        if self.factors:
            p50 = p50 * self._factor_matrix(mkeys, [s.key for s in specs])
        # the physical floor (as predict()): the P90 moves with the P50
        jobs = np.asarray([j for j, _p, _m, _c in uniq], dtype=float).reshape(len(uniq), F.N_JOB)
        scale = np.asarray([self.floor_scale(m, d.mode) for m, d in zip(mkeys, first, strict=True)])
        floors = scale[:, None] * bound.floor_matrix(jobs, [p for _j, p, _m, _c in uniq], specs)
        lift = np.maximum(1.0, floors / p50)
        if q == "p50":
            times = p50 * lift
        else:  # P90 = P50 + the residual quantile, never below the P50 (as predict())
            p90 = np.exp(base + scores + np.maximum(self._raw(x, "p90"), 0.0)).reshape(len(uniq), k)
            times = np.maximum(p90, p50) * lift
        return np.asarray(times[np.asarray(inverse, dtype=np.int64)])

    def _factor_matrix(self, model_keys: Sequence[str], gpu_keys: Sequence[str]) -> np.ndarray[Any, Any]:
        """[n, k] P50 multipliers; rows of unknown models share one factor (the common bulk case)."""
        import numpy as np

        out = np.full((len(model_keys), len(gpu_keys)), self.factors.get("model", 1.0))
        by_model: dict[str, list[float]] = {}
        for i, m in enumerate(model_keys):
            if m in self.known:
                if m not in by_model:
                    by_model[m] = [self.factor(m, g) for g in gpu_keys]
                out[i] = by_model[m]
        return out

    def raw_scores(
        self, x: np.ndarray[Any, Any], unseen: np.ndarray[Any, Any] | None = None
    ) -> np.ndarray[Any, Any]:
        """The P50 trees' output (log efficiency) for a feature matrix, before the completion's
        shift (``cf_shifts``). Rows flagged in ``unseen`` (models absent from the training data)
        use the unseen-model P50."""
        if unseen is not None and unseen.any() and "p50_unseen" in self._trees:
            import numpy as np

            s50 = np.empty(x.shape[0])
            if not unseen.all():
                s50[~unseen] = self._raw(x[~unseen], "p50")
            s50[unseen] = self._raw(x[unseen], "p50_unseen")
        else:
            s50 = self._raw(x, "p50")
        return s50

    def _raw(self, x: np.ndarray[Any, Any], q: str) -> np.ndarray[Any, Any]:
        booster = self._booster(q)
        if booster is not None:
            import numpy as np

            return np.array(booster.predict(x, num_threads=0), dtype=float)
        return predict_np(self._trees[q], x)

    def _booster(self, q: str) -> Any:
        if q not in self._bulk:
            try:
                import lightgbm as lgb

                self._bulk[q] = lgb.Booster(model_str=self.boosters[q])
            except Exception:  # lightgbm missing or broken: fall back to numpy trees
                self._bulk[q] = None
        return self._bulk[q]

    @property
    def trees(self) -> Mapping[str, list[Tree]]:
        """The parsed trees per booster (what the model file stores)."""
        return self._trees
