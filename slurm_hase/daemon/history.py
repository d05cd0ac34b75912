"""Jobs without a workload description are described by history: the same user's finished jobs
of the same name in sacct (issue #3). Their median GPU-time on the type they ran on is carried to
the other types with the predictor's speed ratios for a typical workload."""

from __future__ import annotations

import logging
import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence

from slurm_hase.daemon.estimator import PredictorLike, catalog_key
from slurm_hase.daemon.state import JobEstimate, RuntimeEstimator
from slurm_hase.errors import HaseError
from slurm_hase.slurm.types import AccountingRecord, Job, JobState

log = logging.getLogger("slurm_hase.daemon.history")

# (user, job name) -> GPU type -> elapsed seconds of successful runs
History = Mapping[tuple[str, str], Mapping[str, Sequence[float]]]


def build_history(records: Sequence[AccountingRecord]) -> dict[tuple[str, str], dict[str, list[float]]]:
    """Completed single-type GPU jobs grouped by (user, name) and GPU type.

    sacct gives every run of a requeued job (``-D``: one record per run, the same job id); the
    runs cut short by a requeue end REQUEUED and are no runtime sample, so a requeued job gives
    the elapsed time of the run that completed, as before sacct was asked for every run."""
    out: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for rec in records:
        typed = {t: n for t, n in rec.alloc_gpus.items() if t and n > 0}
        if rec.state is not JobState.COMPLETED or len(typed) != 1 or rec.elapsed_s <= 0:
            continue
        (gpu_type,) = typed
        out[(rec.user, rec.name)][gpu_type].append(float(rec.elapsed_s))
    return {k: dict(v) for k, v in out.items()}


class HistoryEstimator:
    """Tries `primary` (the descriptor) first; falls back to sacct history for jobs with none."""

    def __init__(self, primary: RuntimeEstimator, history: Callable[[], History],
                 speed: Callable[[str], float | None]) -> None:
        self.primary = primary
        self.history = history
        self._speed_of = speed  # GPU type -> speed of a typical job (higher = faster), None=unknown
        self._speeds: dict[str, float | None] = {}

    def speed(self, gpu_type: str) -> float | None:
        if gpu_type not in self._speeds:
            self._speeds[gpu_type] = self._speed_of(gpu_type)
        return self._speeds[gpu_type]

    def estimate(self, job: Job, gpu_types: Sequence[str]) -> JobEstimate | None:
        est = self.primary.estimate(job, gpu_types)
        if est is not None or '"hase"' in job.comment:
            return est  # described (or described badly: the primary logged why)
        seen = self.history().get((job.user, job.name))
        if not seen:
            return None
        # Each observed type gives an estimate for every type; take the median per type.
        guesses: dict[str, list[float]] = defaultdict(list)
        for ran_on, elapsed in seen.items():
            ran_speed = self.speed(ran_on)
            if ran_speed is None:
                continue
            base = statistics.median(elapsed)
            for t in gpu_types:
                if (t_speed := self.speed(t)) is not None:
                    guesses[t].append(base * ran_speed / t_speed)
        if not guesses:
            return None
        return JobEstimate(runtime_s={t: statistics.median(v) for t, v in guesses.items()})


class CachedHistory:
    """sacct history, refreshed at most every `ttl_s` (clock passed in); keeps the last good one."""

    def __init__(self, fetch: Callable[[], Sequence[AccountingRecord]], now: Callable[[], float],
                 ttl_s: float = 600.0) -> None:
        self.fetch = fetch
        self.now = now
        self.ttl_s = ttl_s
        self._at: float | None = None
        self._history: History = {}

    def __call__(self) -> History:
        t = self.now()
        # a clock stepped back (an NTP fix) counts as time gone by: before, an hour's step
        # kept the history unrefreshed for that hour on top of the ttl
        if self._at is None or abs(t - self._at) >= self.ttl_s:
            self._at = t
            try:
                self._history = build_history(self.fetch())
            except HaseError as exc:
                log.warning("sacct history not refreshed: %s", exc)
        return self._history


def predictor_speed(predictor: PredictorLike) -> Callable[[str], float | None]:
    """Speed of a typical job (ResNet-50, batch 64, fp32 training) per GPU type, from the model."""
    from slurm_hase.predict.descriptor import WorkloadDescriptor

    typical = WorkloadDescriptor.from_mapping({"model": "resnet50", "batch_size": "64"})

    def speed(gpu_type: str) -> float | None:
        try:
            key = catalog_key(gpu_type)
            pred = predictor.predict(typical, [key])[key]
        except (HaseError, KeyError):
            return None
        return 1.0 / pred.iter_time_p50 if pred.iter_time_p50 > 0 else None

    return speed
