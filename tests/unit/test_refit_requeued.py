"""Refit and requeued jobs: a checkpointing job's last run resumed, so its elapsed time covers
only the iterations left; it must not become a too-fast row. Real capture: job 911 of the local
24.11 cluster, two runs on 2 T4 GPUs (11 s, requeued, then 25 s to the end)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_hase.predict.dataset import SHIPPED_DATA, Measurement, read_csv
from slurm_hase.predict.descriptor import WorkloadDescriptor
from slurm_hase.predict.refit import harvest
from slurm_hase.reports.saved import read_saved_sacct
from slurm_hase.slurm.types import AccountingRecord

LAST_RUN_S = 25  # the completed run's elapsed time in the capture


@pytest.fixture(scope="module")
def t4_row() -> Measurement:
    """A real 2-GPU T4 step time (Pollux) from the shipped data: the workload job 911 stands for."""
    return next(m for m in read_csv(SHIPPED_DATA) if m.gpu == "t4" and m.desc.num_gpus == 2)


def _job_911(fixtures_dir: Path, tmp_path: Path, desc: WorkloadDescriptor) -> list[AccountingRecord]:
    """Both runs of the captured requeued job, its comment set to ``desc``."""
    doc = json.loads((fixtures_dir / "slurm" / "local-24.11" / "sacct-requeued.json").read_text())
    assert [j["time"]["elapsed"] for j in doc["jobs"]] == [11, LAST_RUN_S]
    for job in doc["jobs"]:
        job["comment"]["job"] = desc.to_comment()
    path = tmp_path / "sacct.json"
    path.write_text(json.dumps(doc))
    return read_saved_sacct(path)


def _desc(m: Measurement, checkpoint: bool) -> WorkloadDescriptor:
    iters = round(LAST_RUN_S / m.iter_time_s)
    return WorkloadDescriptor(model=m.desc.model, batch_size=m.desc.batch_size, num_gpus=2,
                              iterations=iters, checkpoint=checkpoint)


def test_a_resumed_checkpointing_job_gives_no_row(
    fixtures_dir: Path, tmp_path: Path, t4_row: Measurement,
) -> None:
    got = harvest(_job_911(fixtures_dir, tmp_path, _desc(t4_row, checkpoint=True)))
    assert got.rows == []
    assert got.skipped == {"not completed": 1, "resumed after a requeue": 1}


def test_a_requeued_job_without_checkpoint_ran_from_the_start_and_is_kept(
    fixtures_dir: Path, tmp_path: Path, t4_row: Measurement,
) -> None:
    desc = _desc(t4_row, checkpoint=False)
    got = harvest(_job_911(fixtures_dir, tmp_path, desc))
    assert got.skipped == {"not completed": 1}
    [row] = got.rows
    assert (row.gpu, row.desc.num_gpus, row.source) == ("t4", 2, "site:sacct:911")
    assert row.iter_time_s == pytest.approx(LAST_RUN_S / desc.iterations)
