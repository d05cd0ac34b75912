"""Sia/Pollux step times become training rows with the iteration time the trace measured."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hase.predict.loaders import load_sia

# Four rows of Pollux's T4 trace for CIFAR-10 (petuum/adaptdl osdi21-artifact, Apache-2.0; the
# same as siasosp23/artifacts sia-simulator/traces/cifar10/placements-aws.csv, lines 1, 2, 717
# and 1142): one GPU, two nodes of two GPUs, four GPUs on one node.
AWS_ROWS = """placement,local_bsz,step_time,sync_time
1,32,0.0427886962890625,0.0004995360016822816
22,32,0.147501540184021,0.10572534713745116
4,32,0.05821514129638672,0.01432212142944336
"""


def test_an_iteration_takes_the_step_time_whose_sync_it_already_includes(tmp_path: Path) -> None:
    # Pollux's and Sia's simulators take step_time - sync_time as a step without the sync, so
    # step_time is the whole iteration (until session 33 the sync was counted twice)
    (tmp_path / "cifar10").mkdir()
    (tmp_path / "cifar10" / "placements-aws.csv").write_text(AWS_ROWS)
    rows = load_sia(tmp_path, clusters=("aws",))
    assert [(r.gpu, r.desc.model, r.desc.batch_size, r.desc.num_gpus) for r in rows] == [
        ("t4", "resnet18-cifar", 32, 1), ("t4", "resnet18-cifar", 32, 4)]  # 2 nodes: skipped
    assert [r.iter_time_s for r in rows] == [pytest.approx(0.0427886962890625, rel=1e-12),
                                             pytest.approx(0.05821514129638672, rel=1e-12)]
    assert all(r.source == "sia:cifar10:aws" for r in rows)
    both = load_sia(tmp_path, clusters=("aws",), single_node=False)
    assert [r.desc.num_gpus for r in both] == [1, 4, 4]
    assert both[1].iter_time_s == pytest.approx(0.147501540184021, rel=1e-12)
