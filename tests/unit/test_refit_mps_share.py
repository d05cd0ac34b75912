"""Refit and MPS shares: a job that ran with a capped share of its GPU's SMs (hsbatch's
--hase-mps below 100, recorded as mps= in its descriptor) or under Slurm's gres/mps must not
become an exclusive-run row. Real capture: the 22.05 cluster's finished jobs (`sacct -P`):
143 done-a100 (--gpus=a100:1) and 145 done-mps (--gres=mps:50)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from slurm_hase.predict.descriptor import WorkloadDescriptor
from slurm_hase.predict.refit import harvest
from slurm_hase.slurm.parse_sacct_text import parse_sacct_parsable
from slurm_hase.slurm.types import AccountingRecord

RESNET = WorkloadDescriptor(model="resnet50", batch_size=64, iterations=10)


@pytest.fixture(scope="module")
def finished(fixtures_dir: Path) -> dict[str, AccountingRecord]:
    text = (fixtures_dir / "slurm" / "22.05" / "sacct-parsable.txt").read_text()
    return {r.name: r for r in parse_sacct_parsable(text)}


def _with(rec: AccountingRecord, desc: WorkloadDescriptor) -> AccountingRecord:
    return dataclasses.replace(rec, comment=desc.to_comment())


def test_a_job_with_a_capped_mps_share_gives_no_row(finished: dict[str, AccountingRecord]) -> None:
    a100 = finished["done-a100"]
    got = harvest([_with(a100, dataclasses.replace(RESNET, mps_share=50))])
    assert got.rows == [] and got.skipped == {"ran under an MPS share": 1}
    # the same job without a share is an exclusive run on its a100, as before
    [row] = harvest([_with(a100, RESNET)]).rows
    assert (row.gpu, row.source) == ("a100", "site:sacct:143")


def test_a_gres_mps_job_is_skipped_for_its_share_not_for_its_gpu_type(
    finished: dict[str, AccountingRecord],
) -> None:
    got = harvest([_with(finished["done-mps"], RESNET)])
    assert got.rows == [] and got.skipped == {"ran under an MPS share": 1}
