"""Decide what hsbatch adds to a submission: the description (job comment) and, for jobs that
ask for untyped GPUs, a constraint naming the GPU types that can run them.

Pure functions of the request, the descriptor, the cluster's nodes and a predictor; the CLI
does the I/O. A GPU type is dropped when it surely cannot serve (the weights alone do not fit its
memory, or the median predicted runtime exceeds the job's time limit) or when it is predicted to
be more than (1 + speed slack) times slower than the job's fastest type: until the daemon's
next cycle routes the job, Slurm must not start a day-long job on a GPU four times slower just
because one is idle. The daemon may widen that constraint later (it is marked as hsbatch's in
the description); a constraint the user wrote is never changed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from slurm_hase.hsbatch.request import Request
    from slurm_hase.predict.descriptor import WorkloadDescriptor

    PredictFn = Callable[[WorkloadDescriptor, Sequence[str]], Mapping[str, object]]

DEFAULT_SPEED_SLACK = 1.0  # HASE_SPEED_SLACK: allow types up to (1 + slack) x slower than the best
BYTES_PER_PARAM = {"fp32": 4.0, "tf32": 4.0, "fp16": 2.0, "bf16": 2.0, "int8": 1.0}


class TypeRow(NamedTuple):
    """One GPU type of the job's partitions, as hsbatch judged it."""

    gpu_type: str
    gpus: int
    memory_gb: float | None
    runtime_p50_s: float | None = None
    runtime_p90_s: float | None = None
    iter_p50_s: float | None = None
    iter_p90_s: float | None = None
    fits_memory: bool | None = None
    finishes: bool | None = None
    has_feature: bool = False
    fast: bool | None = None  # within the speed slack of the fastest type (None = unknown)
    # a MIG instance type for a job on several GPUs: CUDA uses one instance per process
    one_gpu_only: bool = False
    # the predictor gave no prediction for it (a type its GPU catalog does not know)
    unknown: bool = False

    @property
    def candidate(self) -> bool:
        return (self.fits_memory is not False and self.finishes is not False
                and self.fast is not False and not self.one_gpu_only)


def min_memory_gb(desc: WorkloadDescriptor, params_m: float | None) -> float | None:
    """A lower bound of GPU memory per GPU: weights (+ gradients when training), spread over
    the job's GPUs; None when the parameter count is unknown."""
    if params_m is None:
        return None
    bpp = BYTES_PER_PARAM.get(desc.precision, 4.0)
    per_param = bpp if desc.mode == "infer" else 2 * bpp
    return params_m * 1e6 * per_param / 1e9 / max(1, desc.num_gpus)


def judge_types(
    types: Mapping[str, tuple[int, bool]],
    desc: WorkloadDescriptor,
    *,
    memory_of: Callable[[str], float | None],
    params_m: float | None,
    time_limit_s: int | None,
    predictions: Mapping[str, object] | None,
    speed_slack: float = 0.0,
) -> list[TypeRow]:
    """A row per GPU type (``types``: type -> (GPU count, all its nodes carry the feature)):
    memory fit, predicted runtime, speed against the fastest usable type (``speed_slack`` > 0),
    and whether nodes carry the feature. A type missing from ``predictions`` is unknown: never
    fast when narrowing by speed, since its speed is not known."""
    from slurm_hase.policy.common import fast_types
    from slurm_hase.predict.mig import one_gpu_only

    need = min_memory_gb(desc, params_m)
    single = {t for t in types if desc.num_gpus > 1 and one_gpu_only(t)}
    usable = {t: float(getattr((predictions or {}).get(t), "iter_time_p50", 0.0) or 0.0)
              for t in types if t not in single
              and (need is None or (m := memory_of(t)) is None or need <= m)}
    fast = fast_types(usable, speed_slack) if speed_slack > 0 else None
    rows: list[TypeRow] = []
    for t, (gpus, has_feature) in types.items():
        mem = memory_of(t)
        pred = (predictions or {}).get(t)
        unknown = predictions is not None and t not in predictions
        r50 = getattr(pred, "runtime_p50_s", None)
        rows.append(TypeRow(
            gpu_type=t,
            gpus=gpus,
            memory_gb=mem,
            runtime_p50_s=r50,
            runtime_p90_s=getattr(pred, "runtime_p90_s", None),
            iter_p50_s=getattr(pred, "iter_time_p50", None),
            iter_p90_s=getattr(pred, "iter_time_p90", None),
            fits_memory=None if need is None or mem is None else need <= mem,
            finishes=None if time_limit_s is None or r50 is None else r50 <= time_limit_s,
            has_feature=has_feature,
            fast=None if not fast or (usable.get(t, 0.0) <= 0.0 and not unknown) else t in fast,
            one_gpu_only=t in single,
            unknown=unknown,
        ))
    return rows


def choose_constraint(rows: Sequence[TypeRow]) -> tuple[str | None, str | None]:
    """(constraint, reason it was not set): an OR of candidate types, or None."""
    if not rows:
        return None, "no typed GPUs in the job's partitions"
    chosen = [r.gpu_type for r in rows if r.candidate]
    if not chosen:
        return None, "no GPU type is predicted to fit and finish; submitting without a type constraint"
    if len(chosen) == len(rows):
        return None, None  # every type can run it: nothing to restrict
    if not all(r.has_feature for r in rows if r.candidate):
        return None, "nodes lack GPU-type features, so no type constraint can be set"
    return "|".join(chosen), None


def why_nothing_fits(rows: Sequence[TypeRow], need_gb: float | None,
                     time_limit_s: int | None) -> str | None:
    """Why no GPU type of `rows` can serve the job (memory, time limit), or None when one can
    or there are no rows."""
    if not rows or any(r.candidate for r in rows):
        return None
    parts: list[str] = []
    if need_gb is not None and all(r.fits_memory is False for r in rows):
        biggest = max(r.memory_gb or 0.0 for r in rows)
        parts.append(f"its weights need at least {need_gb:.1f} GB per GPU, more than any GPU type "
                     f"here has (largest {biggest:.0f} GB)")
    timed = [r for r in rows if r.runtime_p50_s is not None and r.fits_memory is not False]
    if time_limit_s is not None and timed and all(r.finishes is False for r in timed):
        best = min(timed, key=lambda r: r.runtime_p50_s or 0.0)
        which = " with a prediction" if any(r.unknown for r in rows) else ""
        parts.append(f"the predicted runtime exceeds the time limit of {time_limit_s} s on every "
                     f"GPU type{which} (fastest: {best.gpu_type}, {best.runtime_p50_s or 0.0:.0f} s)")
    if not parts:
        parts.append("no GPU type is both fast enough and able to run it")
    return "no GPU type here can run this job: " + "; ".join(parts)


def needs_predictions(req: Request, desc: WorkloadDescriptor, explain: bool,
                      speed_slack: float = 0.0) -> bool:
    """Predictions change the outcome with a speed slack, or with a time limit and a known
    iteration count."""
    return explain or speed_slack > 0 or (req.time_limit_s is not None and desc.iterations is not None)


def may_constrain(req: Request, *, test_only: bool, het: bool, enabled: bool,
                  pbs: bool = False) -> bool:
    """Only untyped GPU jobs, never over a user's constraint, node list or exclusion or
    explicit type, nor where #PBS directives (which sbatch reads, hsbatch does not) may say
    more about the job, nor on a held job: sbatch takes one without checking that any nodes
    fit it, so a constraint no nodes meet would leave it pending for ever once released."""
    return (enabled and not test_only and not het and not pbs and not req.held
            and req.gpu_untyped
            and not req.gpu_typed and not req.constrained and not req.multi_cluster)


def params_m(desc: WorkloadDescriptor) -> float | None:
    """The job's parameter count (millions): given, else the model table's, else None."""
    from slurm_hase.predict.models import lookup_model

    if desc.params_m is not None:
        return desc.params_m
    info = lookup_model(desc.model) if desc.model else None
    return info.params_m if info else None


def speed_slack(env: Mapping[str, str]) -> tuple[float, str | None]:
    """HASE_SPEED_SLACK (default 1.0: types up to 2x slower than the fastest stay allowed);
    0 turns narrowing by speed off. A bad value falls back to the default, with a warning."""
    raw = env.get("HASE_SPEED_SLACK", "")
    if not raw:
        return DEFAULT_SPEED_SLACK, None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if 0.0 <= value <= 1e6:
        return value, None
    return DEFAULT_SPEED_SLACK, (f"HASE_SPEED_SLACK={raw!r} is not a number from 0 to 1e6; "
                                 f"using the default {DEFAULT_SPEED_SLACK}")
