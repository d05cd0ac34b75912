"""Jobs without a description are estimated from the same user's finished jobs of that name."""

from __future__ import annotations

from collections.abc import Sequence

from slurm_hase.daemon.cycle import JobEstimate
from slurm_hase.daemon.history import CachedHistory, HistoryEstimator, build_history
from slurm_hase.errors import SlurmUnavailableError
from slurm_hase.slurm.types import AccountingRecord, GpuRequest, Job, JobState

SPEED = {"a100": 3.0, "v100": 2.0, "t4": 1.0}


def rec(jid: str, name: str, gpu: str, elapsed: int, state: JobState = JobState.COMPLETED,
        user: str = "alice") -> AccountingRecord:
    return AccountingRecord(jid, name, "teama", user, state, elapsed_s=elapsed,
                            alloc_gpus={gpu: 1, "": 1} if gpu else {})


def job(name: str, comment: str = "", user: str = "alice") -> Job:
    return Job("50", name, user, "teama", "gpu", JobState.PENDING, comment=comment,
               gpu=GpuRequest(1, None, "job"))


class NoDescriptor:
    def __init__(self) -> None:
        self.calls = 0

    def estimate(self, job: Job, gpu_types: Sequence[str]) -> JobEstimate | None:
        self.calls += 1
        return None


def estimator(records: list[AccountingRecord]) -> HistoryEstimator:
    hist = build_history(records)
    return HistoryEstimator(NoDescriptor(), lambda: hist, SPEED.get)


def test_history_carries_median_runtime_to_other_types() -> None:
    est = estimator([rec("1", "train", "t4", 300), rec("2", "train", "t4", 900),
                     rec("3", "train", "t4", 600), rec("4", "train", "t4", 5, JobState.FAILED)])
    got = est.estimate(job("train"), ["a100", "v100", "t4"])
    assert got is not None
    assert got.runtime_s == {"t4": 600.0, "v100": 300.0, "a100": 200.0}


def test_no_history_other_user_or_name_means_unknown() -> None:
    est = estimator([rec("1", "train", "t4", 300, user="bob"), rec("2", "eval", "t4", 300)])
    assert est.estimate(job("train"), ["t4"]) is None


def test_a_bad_descriptor_is_not_replaced_by_history() -> None:
    est = estimator([rec("1", "train", "t4", 300)])
    assert est.estimate(job("train", comment='{"hase":1,"bs":"x"}'), ["t4"]) is None


def test_cached_history_refreshes_after_ttl_and_survives_sacct_outage() -> None:
    clock = {"t": 0.0}
    calls = {"n": 0}

    def fetch() -> list[AccountingRecord]:
        calls["n"] += 1
        if calls["n"] == 3:
            raise SlurmUnavailableError(["sacct"], 1, "Unable to contact slurm controller")
        return [rec(str(calls["n"]), "train", "t4", 100 * calls["n"])]

    hist = CachedHistory(fetch, lambda: clock["t"], ttl_s=60)
    assert hist()[("alice", "train")]["t4"] == [100.0]
    clock["t"] = 30
    assert hist()[("alice", "train")]["t4"] == [100.0] and calls["n"] == 1
    clock["t"] = 61
    assert hist()[("alice", "train")]["t4"] == [200.0]
    clock["t"] = 130
    assert hist()[("alice", "train")]["t4"] == [200.0]  # outage: last good history kept
    assert calls["n"] == 3


def test_unknown_speed_types_are_left_out() -> None:
    hist = build_history([rec("1", "train", "t4", 300)])
    est = HistoryEstimator(NoDescriptor(), lambda: hist,
                           lambda t: None if t == "h100" else SPEED.get(t))
    got = est.estimate(job("train"), ["h100", "t4"])
    assert got is not None and set(got.runtime_s) == {"t4"}


def test_cached_history_refreshes_after_the_clock_stepped_back() -> None:
    """An NTP step back of an hour: the history is asked again after ttl_s, not after the hour
    plus ttl_s (t - at stayed negative until the clock caught up)."""
    clock = {"t": 10_000.0}
    calls = {"n": 0}

    def fetch() -> list[AccountingRecord]:
        calls["n"] += 1
        return [rec(str(calls["n"]), "train", "t4", 100 * calls["n"])]

    hist = CachedHistory(fetch, lambda: clock["t"], ttl_s=600)
    hist()
    clock["t"] = 10_000.0 - 3600  # stepped back an hour
    hist()
    clock["t"] += 30  # within ttl of the step: cached
    hist()
    assert calls["n"] == 2
