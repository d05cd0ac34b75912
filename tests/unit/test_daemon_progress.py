"""A requeued checkpointing job is estimated at the work it has left (daemon/progress.py).

The runs come from sacct's own output of a requeued job (tests/fixtures/slurm/local-*/
sacct-requeued.txt: 2 t4 GPUs, a run of 11 s ended by a requeue, then 25 s to the end)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_hase.daemon.progress import (
    MIN_WORK_LEFT,
    RETRY_S,
    ProgressEstimator,
    Run,
    requeued_runs,
    work_left,
)
from slurm_hase.daemon.records import JobEstimate
from slurm_hase.errors import SlurmUnavailableError
from slurm_hase.slurm import commands
from slurm_hase.slurm.parse_sacct_text import parse_sacct_parsable
from slurm_hase.slurm.types import AccountingRecord, Job, JobState

RUNTIME = {"t4": 100.0, "a100": 25.0}  # the job's full runtime per type, seconds


def _records(fixtures_dir: Path, release: str) -> list[AccountingRecord]:
    raw = (fixtures_dir / "slurm" / f"local-{release}" / "sacct-requeued.txt").read_text()
    return parse_sacct_parsable(raw, delimiter=commands.SACCT_DELIMITER)


@pytest.mark.parametrize(("release", "job_id"), [("22.05", "105"), ("24.11", "911")])
def test_the_requeued_run_is_read_from_sacct(fixtures_dir: Path, release: str, job_id: str) -> None:
    assert requeued_runs(_records(fixtures_dir, release)) == {job_id: [Run("t4", 11.0)]}


def test_work_left_counts_each_run_at_its_types_speed_less_the_overhead() -> None:
    assert work_left(RUNTIME, [Run("t4", 60.0)], 10.0) == pytest.approx(0.5)
    # 20 - 10 s on an A100 is 40% of the work, 30 - 10 s on a T4 another 20%
    assert work_left(RUNTIME, [Run("a100", 20.0), Run("t4", 30.0)], 10.0) == pytest.approx(0.4)
    assert work_left(RUNTIME, [Run("t4", 5.0)], 10.0) == 1.0  # lost to the overhead
    assert work_left(RUNTIME, [Run("v100", 500.0), Run("", 500.0)], 0.0) == 1.0  # unknown
    assert work_left(RUNTIME, [Run("t4", 1000.0)], 0.0) == MIN_WORK_LEFT


class Inner:
    repeatable = True

    def __init__(self, checkpoint: bool = True) -> None:
        self.checkpoint = checkpoint

    def estimate(self, job: Job, gpu_types: Sequence[str]) -> JobEstimate | None:
        return JobEstimate(runtime_s={t: RUNTIME[t] for t in gpu_types},
                           checkpoint=self.checkpoint)


class Sacct:
    def __init__(self, answers: list[list[AccountingRecord] | Exception]) -> None:
        self.answers = answers
        self.asked: list[list[str]] = []

    def __call__(self, job_ids: Sequence[str]) -> list[AccountingRecord]:
        self.asked.append(list(job_ids))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


JOB = Job(job_id="105", name="requeued", user="root", account="teamb", partition="debug",
          state=JobState.PENDING, restarts=1, requeue=True)


def test_a_requeued_checkpointing_job_has_its_work_left(fixtures_dir: Path) -> None:
    sacct = Sacct([_records(fixtures_dir, "22.05")])
    est = ProgressEstimator(Inner(), sacct, Clock(), overhead_s=1.0)
    got = est.estimate(JOB, ["t4", "a100"])
    assert got is not None  # 11 s less 1 s of 100 s on a T4: 90% left
    assert got.runtime_s == {"t4": pytest.approx(90.0), "a100": pytest.approx(22.5)}
    assert est.repeatable  # every run it was told of is known
    est.estimate(JOB, ["t4"])
    assert sacct.asked == [["105"]]  # asked once per restart count
    # control: with the overhead at the run's length nothing is done, the estimate is whole
    whole = ProgressEstimator(Inner(), Sacct([_records(fixtures_dir, "22.05")]), Clock(),
                              overhead_s=11.0).estimate(JOB, ["t4"])
    assert whole is not None and whole.runtime_s == {"t4": 100.0}


@pytest.mark.parametrize("job", [replace(JOB, restarts=0), JOB])
def test_a_job_that_starts_over_keeps_its_estimate(fixtures_dir: Path, job: Job) -> None:
    sacct = Sacct([_records(fixtures_dir, "22.05")])
    inner = Inner(checkpoint=job.restarts == 0)  # never requeued, or requeued without checkpoint
    got = ProgressEstimator(inner, sacct, Clock()).estimate(job, ["t4"])
    assert got is not None and got.runtime_s == {"t4": 100.0} and sacct.asked == []


def test_sacct_without_the_run_yet_is_asked_again_a_minute_later(fixtures_dir: Path) -> None:
    clock = Clock()
    sacct = Sacct([[], _records(fixtures_dir, "22.05")])
    est = ProgressEstimator(Inner(), sacct, clock, overhead_s=1.0)
    first = est.estimate(JOB, ["t4"])
    assert first is not None and first.runtime_s == {"t4": 100.0}
    assert not est.repeatable  # its run is still to come: every job is estimated again
    clock.t += RETRY_S - 1
    est.estimate(JOB, ["t4"])
    assert len(sacct.asked) == 1
    clock.t += 1
    later = est.estimate(JOB, ["t4"])
    assert later is not None and later.runtime_s == {"t4": pytest.approx(90.0)}
    assert len(sacct.asked) == 2 and est.repeatable


def test_sacct_down_leaves_the_full_estimate_and_is_retried(fixtures_dir: Path) -> None:
    clock = Clock()
    sacct = Sacct([SlurmUnavailableError(["sacct"], 1, "slurmdbd down"), _records(fixtures_dir, "22.05")])
    est = ProgressEstimator(Inner(), sacct, clock, overhead_s=1.0)
    down = est.estimate(JOB, ["t4"])
    assert down is not None and down.runtime_s == {"t4": 100.0}
    clock.t += RETRY_S
    up = est.estimate(JOB, ["t4"])
    assert up is not None and up.runtime_s == {"t4": pytest.approx(90.0)}


def test_a_second_requeue_asks_again(fixtures_dir: Path) -> None:
    records = _records(fixtures_dir, "22.05")
    second = replace(records[0], state=JobState.REQUEUED, elapsed_s=31)  # a later run, 31 s
    sacct = Sacct([records, [records[0], second]])
    est = ProgressEstimator(Inner(), sacct, Clock(), overhead_s=1.0)
    est.estimate(JOB, ["t4"])
    got = est.estimate(replace(JOB, restarts=2), ["t4"])
    assert got is not None and got.runtime_s == {"t4": pytest.approx(60.0)}  # 10 + 30 done
    assert sacct.asked == [["105"], ["105"]]


def test_the_estimator_schedd_run_builds_reads_requeued_runs(fixtures_dir: Path, tmp_path: Path) -> None:
    """`hase schedd run`'s estimator: the shipped model's estimate, scaled by the runs sacct
    (here the fake backend) gives, with the configured overhead."""
    import click

    from slurm_hase.cli.schedd_run import build_daemon
    from slurm_hase.daemon.config import from_mapping
    from slurm_hase.daemon.fake import FakeBackend
    from slurm_hase.daemon.loop import WallClock
    from slurm_hase.daemon.metrics import Metrics

    run = replace(_records(fixtures_dir, "22.05")[0], elapsed_s=1801)  # 1800 s done at 1 s lost
    backend = FakeBackend()
    backend.records = [run]
    cfg = from_mapping({"schedd": {"state_db": str(tmp_path / "s.db"), "requeue_overhead_s": 1}})
    job = replace(JOB, comment='{"hase":1,"model":"resnet50","bs":64,"iters":100000,"ckpt":1}')
    with click.Context(click.Command("run")):
        daemon = build_daemon(cfg, backend, WallClock(), Metrics())
        assert isinstance(daemon.estimator, ProgressEstimator)
        whole = daemon.estimator.inner.estimate(job, ["t4", "a100"])
        left = daemon.estimator.estimate(job, ["t4", "a100"])
    assert whole is not None and left is not None and whole.checkpoint
    share = 1 - 1800 / whole.runtime_s["t4"]
    assert 0 < share < 1
    assert left.runtime_s == {t: pytest.approx(r * share) for t, r in whole.runtime_s.items()}
