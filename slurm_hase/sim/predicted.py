"""Predicted speeds for GPU types the measured table lacks (`hase simulate --predicted-speeds`).

Gavel's table measures k80, p100 and v100 only. A site with A100s or T4s can still simulate its
own fleet: for every measured (job type, scale factor) of the reference type (v100), a type t
without measurements gets

    steps/s on t = measured steps/s on v100 x predicted iteration time on v100 / on t

from the predictor (the shipped model, or a site's retrained one), so each job type keeps its
measured v100 speed and only the ratio between the types is predicted. Sharing a GPU of type t
through MPS slows a job by the factors measured on v100 (pair_factor is the same). The table
records which types are predicted (ThroughputTable.predicted): those speeds are an estimate,
not a measurement, and a run says so.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Protocol

from slurm_hase.predict.api import Prediction
from slurm_hase.predict.descriptor import WorkloadDescriptor
from slurm_hase.predict.mig import one_gpu_only
from slurm_hase.sim.throughput import REFERENCE_TYPE, ThroughputTable
from slurm_hase.sim.workloads import job_type_descriptor


class SpeedPredictor(Protocol):
    """What predicts the speeds (predict.api.Predictor, or a test's stand-in)."""

    def predict(self, desc: WorkloadDescriptor, gpu_types: Sequence[str]
                ) -> Mapping[str, Prediction]: ...


def predicted_table(table: ThroughputTable, gpu_types: Sequence[str],
                    predictor: SpeedPredictor) -> ThroughputTable:
    """`table` with predicted speeds for each of `gpu_types` it has no measurements of (catalog
    keys); measured types are left as they are."""
    new = [t for t in dict.fromkeys(gpu_types) if not table.isolated.get(t)]
    if not new:
        return table
    ref = table.isolated[REFERENCE_TYPE]
    # the measured types' tables are shared, not copied: nothing here changes them
    isolated = dict(table.isolated)
    colocated = dict(table.colocated)
    for gpu_type in new:
        speeds: dict[tuple[str, int], float] = {}
        one_only = one_gpu_only(gpu_type)
        for (job_type, sf), tput in ref.items():
            if tput <= 0 or (sf > 1 and one_only):
                continue  # a MIG instance runs no multi-GPU job (predict/mig.py)
            pred = predictor.predict(job_type_descriptor(job_type, sf), [REFERENCE_TYPE, gpu_type])
            speeds[(job_type, sf)] = tput * pred[REFERENCE_TYPE].iter_time_p50 / pred[
                gpu_type].iter_time_p50
        isolated[gpu_type] = speeds
        # a job's speed while sharing = its speed alone x the factor measured on the reference
        colocated[gpu_type] = {
            a: {b: shared / ref[(a, 1)] * speeds[(a, 1)] for b, shared in row.items()}
            for a, row in table.colocated.get(REFERENCE_TYPE, {}).items()
            if ref.get((a, 1), 0.0) > 0 and (a, 1) in speeds}
    return replace(table, isolated=isolated, colocated=colocated,
                   predicted=tuple(sorted({*table.predicted, *new})))


def predicted_note(table: ThroughputTable, model: str | None,
                   trained_on: Collection[str] | None = None) -> str:
    """What a run tells its user: the predicted types with their median speed against the
    reference type, or that every type is measured. `model`: its file (None: shipped);
    `trained_on`: the GPU types it has training rows of (None: not known), so that a type
    predicted from its catalog figures alone is named as such."""
    if not table.predicted:
        return (f"--predicted-speeds: every GPU type has measured speeds "
                f"({', '.join(table.gpu_types)}); nothing is predicted")
    medians = ", ".join(f"{t} {table.relative_speed(t):.2f}x" for t in table.predicted)
    which = "the shipped model" if model is None else f"the model {model}"
    unseen = [] if trained_on is None else [t for t in table.predicted if t not in trained_on]
    alone = (f"; the model has no rows of {', '.join(unseen)} at all: "
             f"{'it is' if len(unseen) == 1 else 'they are'} predicted from catalog figures "
             f"alone" if unseen else "")
    return (f"{', '.join(table.predicted)}: no measured speeds; predicted by {which} "
            f"from each job type's measured {REFERENCE_TYPE} speed (median against the "
            f"{REFERENCE_TYPE}: {medians}{alone}). Results on these types rest on an estimate, "
            f"not a measurement (docs/simulator.md)")


def predicted_meta(table: ThroughputTable, model: str | None) -> dict[str, object] | None:
    """The run's record (JSON meta) of predicted speeds: the model ("shipped" or its file) and
    each predicted type's median speed against the reference type; None when every type is
    measured."""
    if not table.predicted:
        return None
    return {"model": model or "shipped",
            "median_vs_reference": {t: round(table.relative_speed(t), 4) for t in table.predicted}}
