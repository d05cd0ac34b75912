"""Preflight: GPU nodes whose GPUs Slurm does not count as TRES (AccountingStorageTRES without
gres/gpu) stop the daemon at start. On such a cluster CfgTRES and AllocTRES name no GPU
(skypilot-org/skypilot#10319 shows one: Gres=gpu:h100:8, CfgTRES=cpu=192,mem=800G,billing=192),
so every GPU would read as free and every routing decision would rest on that."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from slurm_hase.daemon.config import DaemonConfig
from slurm_hase.daemon.preflight import ClusterFacts, check_config, cluster_facts
from slurm_hase.slurm.parse_text import parse_scontrol_nodes
from tests.conftest import slurm_capture


@pytest.fixture()
def captured(fixtures_dir: Path) -> str:
    """`scontrol show node -o` of the 22.05 test cluster (it tracks gres/gpu)."""
    return slurm_capture(fixtures_dir, "22.05", "scontrol-show-node.txt")


def _untracked(raw: str) -> str:
    """The same records as a cluster without gres/gpu in AccountingStorageTRES prints them:
    the gres/* entries gone from CfgTRES and AllocTRES (Gres= is what gres.conf says)."""
    return re.sub(r",gres/[^ ,]*", "", raw)


def test_a_tracking_cluster_is_fine(captured: str) -> None:
    nodes = parse_scontrol_nodes(captured)
    assert nodes and not any(n.gpus_untracked for n in nodes)
    assert check_config(DaemonConfig(), cluster_facts(nodes, [])) == []


def test_gpus_without_tres_are_fatal(captured: str) -> None:
    nodes = parse_scontrol_nodes(_untracked(captured))
    gpu_nodes = [n.name for n in nodes if sum(n.gpus.values()) > 0]
    assert gpu_nodes and [n.name for n in nodes if n.gpus_untracked] == gpu_nodes
    assert all(sum(n.gpus_alloc.values()) == 0 for n in nodes)  # what the daemon would see
    [problem] = check_config(DaemonConfig(), cluster_facts(nodes, []))
    assert problem.fatal
    assert problem.message.startswith(
        f"Slurm does not count GPUs as TRES: node {', '.join(gpu_nodes[:3])}, ... has GPUs in "
        "Gres but no gres/gpu in CfgTRES")
    assert "AccountingStorageTRES" in problem.message


def test_facts_without_untracked_nodes_are_unchanged() -> None:
    assert ClusterFacts({"gpu": frozenset({"a100"})}).untracked == ()
