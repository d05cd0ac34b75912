"""DescriptorEstimator: re-predicts from the comment, caches, rejects bad comments safely."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace

import pytest

from slurm_hase.daemon.estimator import DescriptorEstimator
from slurm_hase.errors import UnknownGpuError
from slurm_hase.predict.descriptor import WorkloadDescriptor
from slurm_hase.slurm.types import GpuRequest, Job, JobState

SPEED = {"a100": 1.0, "v100": 2.0, "t4": 3.0}  # seconds per iteration


@dataclass(frozen=True)
class Pred:
    iter_time_p50: float
    runtime_p50_s: float | None


class CountingPredictor:
    def __init__(self) -> None:
        self.calls = 0

    def predict(self, desc: WorkloadDescriptor, gpu_types: Sequence[str]) -> dict[str, Pred]:
        self.calls += 1
        it = desc.iterations
        return {t: Pred(SPEED[t], SPEED[t] * it if it else None) for t in gpu_types}

    def mps_slowdown(self, desc: WorkloadDescriptor, corunners: Sequence[WorkloadDescriptor],
                     gpu_type: str) -> float:
        return 1.0


def resolve(name: str) -> str:
    if name not in SPEED:
        raise UnknownGpuError(name, [])
    return name


def job(comment: str, jid: str = "1", limit: int | None = None) -> Job:
    return Job(job_id=jid, name="j", user="u", account="a", partition="gpu",
               state=JobState.PENDING, comment=comment, gpu=GpuRequest(1, None, "job"),
               time_limit_s=limit)


GOOD = WorkloadDescriptor(model="resnet50", batch_size=64, iterations=100).to_comment()


def test_predicts_runtimes_and_caches() -> None:
    pred = CountingPredictor()
    est = DescriptorEstimator(pred, resolve=resolve)
    e = est.estimate(job(GOOD), ["a100", "t4", "mystery"])
    assert e is not None and dict(e.runtime_s) == {"a100": 100.0, "t4": 300.0}
    for _ in range(3):
        assert est.estimate(job(GOOD), ["a100", "t4", "mystery"]) == e
    assert pred.calls == 1
    other = WorkloadDescriptor(model="resnet50", batch_size=64, iterations=10).to_comment()
    e2 = est.estimate(job(other), ["a100", "t4", "mystery"])  # edited comment: re-predicted
    assert e2 is not None and e2.runtime_s["a100"] == 10.0 and pred.calls == 2


def test_without_iterations_the_slowest_type_takes_the_time_limit() -> None:
    est = DescriptorEstimator(CountingPredictor(), resolve=resolve)
    comment = WorkloadDescriptor(model="resnet50", batch_size=64).to_comment()
    e = est.estimate(job(comment, limit=3000), ["a100", "v100", "t4"])
    assert e is not None and dict(e.runtime_s) == {"a100": 1000.0, "v100": 2000.0, "t4": 3000.0}


def test_user_typed_runtime_numbers_are_not_trusted() -> None:
    # A descriptor has no runtime field; a user adding one makes it malformed, never trusted.
    est = DescriptorEstimator(CountingPredictor(), resolve=resolve)
    assert est.estimate(job('{"hase":1,"model":"resnet50","runtime_s":1}'), ["a100"]) is None


@pytest.mark.parametrize("comment", [
    '{"hase":1,"model":"$(rm -rf /)"}',
    '{"hase":1,"model":"resnet50","bs":"; touch /tmp/pwned"}',
    '{"hase":1,"model":"resnet50"',
    '{"hase":1,' + '"x":[' * 5000,
    '{"hase":1,"model":"resnet50","bs":NaN}',
    '{"hase":2,"model":"resnet50"}',
    '{"hase":1,"model":"resnet50","bs":1e400}',
])
def test_hostile_comments_are_ignored_with_a_reason(
        comment: str, caplog: pytest.LogCaptureFixture) -> None:
    pred = CountingPredictor()
    est = DescriptorEstimator(pred, resolve=resolve)
    with caplog.at_level(logging.WARNING, logger="slurm_hase.daemon.estimator"):
        assert est.estimate(job(comment, jid="66"), ["a100"]) is None
    assert pred.calls == 0
    assert "66" in est.rejected and est.rejected["66"]
    assert "job 66: descriptor ignored" in caplog.text


def test_plain_comment_is_unknown_without_warning(caplog: pytest.LogCaptureFixture) -> None:
    est = DescriptorEstimator(CountingPredictor(), resolve=resolve)
    with caplog.at_level(logging.WARNING):
        assert est.estimate(job("nightly run"), ["a100"]) is None
    assert caplog.text == "" and est.rejected == {}


def test_cache_is_bounded() -> None:
    est = DescriptorEstimator(CountingPredictor(), resolve=resolve, max_cache=10)
    for i in range(50):
        est.estimate(job(GOOD, jid=str(i)), ["a100"])
    assert len(est._cache) == 10


class RecordingPredictor(CountingPredictor):
    def __init__(self) -> None:
        super().__init__()
        self.gpus: list[int] = []

    def predict(self, desc: WorkloadDescriptor, gpu_types: Sequence[str]) -> dict[str, Pred]:
        self.gpus.append(desc.num_gpus)
        return super().predict(desc, gpu_types)


@pytest.mark.parametrize(("comment_gpus", "asked", "predicted_for"), [
    (1, GpuRequest(4, None, "job"), 4),  # no gpus= in the description: the job's request
    (1, GpuRequest(2, "a100", "node"), 2),
    (2, GpuRequest(4, None, "job"), 2),  # the description says so: kept
    (1, GpuRequest(0, None, "node", mps=50), 1),  # an MPS share is one GPU's fraction
    (1, GpuRequest(1, None, "job"), 1),
])
def test_gpu_count_defaults_to_the_request(comment_gpus: int, asked: GpuRequest,
                                           predicted_for: int) -> None:
    pred = RecordingPredictor()
    comment = WorkloadDescriptor(model="resnet50", batch_size=64, iterations=100,
                                 num_gpus=comment_gpus).to_comment()
    j = Job(job_id="9", name="j", user="u", account="a", partition="gpu",
            state=JobState.PENDING, comment=comment, gpu=asked)
    assert DescriptorEstimator(pred, resolve=resolve).estimate(j, ["a100"]) is not None
    assert pred.gpus == [predicted_for]


class SharingPredictor(CountingPredictor):
    """CountingPredictor that also prices MPS sharing: 1.5x on every type but t4's 2x."""

    def __init__(self) -> None:
        super().__init__()
        self.shared: list[tuple[WorkloadDescriptor, tuple[WorkloadDescriptor, ...], str]] = []

    def mps_slowdown(self, desc: WorkloadDescriptor, corunners: Sequence[WorkloadDescriptor],
                     gpu_type: str) -> float:
        self.shared.append((desc, tuple(corunners), gpu_type))
        return 2.0 if gpu_type == "t4" else 1.5


def test_a_job_asking_an_mps_share_gets_its_slowdown_beside_a_copy_of_itself() -> None:
    # before session 43 the daemon left mps_slowdown empty: every policy priced a shared GPU
    # as fast as a whole one (the simulator's estimator did fill it)
    pred = SharingPredictor()
    share = Job(job_id="5", name="j", user="u", account="a", partition="gpu",
                state=JobState.PENDING, comment=GOOD, gpu=GpuRequest(0, None, "node", 50))
    est = DescriptorEstimator(pred, resolve=resolve).estimate(share, ["a100", "t4"])
    assert est is not None and dict(est.mps_slowdown) == {"a100": 1.5, "t4": 2.0}
    desc, corunners, _ = pred.shared[0]
    assert corunners == (desc,) and desc.model == "resnet50" and not desc.corunner_gflops
    whole = DescriptorEstimator(pred, resolve=resolve).estimate(job(GOOD, "6"), ["a100"])
    assert whole is not None and dict(whole.mps_slowdown) == {}  # a whole GPU shares nothing


def test_the_shipped_predictor_slows_an_mps_share_on_every_type() -> None:
    from slurm_hase.predict.modelfile import load_predictor

    share = Job(job_id="42", name="j", user="u", account="a", partition="gpu",
                state=JobState.PENDING, gpu=GpuRequest(0, None, "node", 50),
                comment='{"hase":1,"model":"resnet50","bs":64,"iters":10000,"mps":50}')
    est = DescriptorEstimator(load_predictor()).estimate(share, ["a100", "v100", "t4"])
    assert est is not None and set(est.mps_slowdown) == {"a100", "v100", "t4"}
    assert all(1.0 < f < 10.0 for f in est.mps_slowdown.values()), est.mps_slowdown


def test_a_changed_gpu_request_or_time_limit_is_estimated_again() -> None:
    pred = CountingPredictor()
    est = DescriptorEstimator(pred, resolve=resolve)
    one = job(WorkloadDescriptor(model="resnet50", batch_size=64).to_comment(), limit=3600)
    first = est.estimate(one, ["a100", "t4"])
    assert est.estimate(one, ["a100", "t4"]) is first and pred.calls == 1
    # scontrol update TresPerNode=gres:gpu:4: the description (no gpus=) is for 4 GPUs now
    four = replace(one, gpu=GpuRequest(4, None, "node"))
    assert est.estimate(four, ["a100", "t4"]) is not first and pred.calls == 2
    # no iterations: runtimes scale to the time limit, which was raised
    longer = est.estimate(replace(one, time_limit_s=7200), ["a100", "t4"])
    assert longer is not None and first is not None
    assert longer.runtime_s["t4"] == 2 * first.runtime_s["t4"] and pred.calls == 3
