"""Refit and GPU counts: the row records the description's gpus=, the time is of the GPUs the
job held; a job that held another count gives no row. Real capture: the 22.05 cluster's finished
jobs (`sacct -P`): 143 done-a100 held 1 a100, 144 done-t4 held 2 t4."""

from __future__ import annotations

import dataclasses

from slurm_hase.predict.refit import harvest
from slurm_hase.slurm.types import AccountingRecord
from tests.unit.test_refit_mps_share import RESNET, _with, finished

__all__ = ["finished"]  # the fixture, used by name


def test_a_job_that_held_more_gpus_than_described_gives_no_row(
    finished: dict[str, AccountingRecord],
) -> None:
    """Described as one GPU, ran on two t4: a one-GPU row would read the two-GPU time."""
    got = harvest([_with(finished["done-t4"], RESNET)])
    assert got.rows == [] and got.skipped == {"held another GPU count than its description says": 1}


def test_a_job_that_held_fewer_gpus_than_described_gives_no_row(
    finished: dict[str, AccountingRecord],
) -> None:
    got = harvest([_with(finished["done-a100"], dataclasses.replace(RESNET, num_gpus=4))])
    assert got.rows == [] and got.skipped == {"held another GPU count than its description says": 1}


def test_matching_counts_give_their_rows(finished: dict[str, AccountingRecord]) -> None:
    got = harvest([_with(finished["done-t4"], dataclasses.replace(RESNET, num_gpus=2)),
                   _with(finished["done-a100"], RESNET)])
    assert sorted((r.gpu, r.desc.num_gpus) for r in got.rows) == [("a100", 1), ("t4", 2)]
