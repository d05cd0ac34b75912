"""Finish-time fairness rho counts only the GPU types a job's trace row lets it use.

A real Alibaba pod whose gpu_spec is P100 (openb-pod-0032, an MPS share of 0.46 GPU), alone on
an idle cluster of P100s and V100s, starts at once on a P100: it was treated as fairly as it
could be, so rho = 1. Its isolated runtime used to be taken on a V100 share it could never
hold, which gave rho 1.16 (and rho > 1 to every constrained pod of a busy run)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_main

POD = "openb-pod-0032,"


def _alone(tmp_path: Path, shared_data: Path, capsys: pytest.CaptureFixture[str],
           gpu_spec: str | None = None) -> dict[str, Any]:
    """The pod's row alone as a pod list (its gpu_spec replaced when given), simulated on
    8 P100 + 8 V100 (measured speeds): the run's metrics."""
    pods = (shared_data / "alibaba" / "cluster-trace-gpu-v2023__openb_pod_list_gpuspec33.csv")
    lines = pods.read_text().splitlines()
    fields = next(line for line in lines if line.startswith(POD)).split(",")
    assert fields[5] == "P100"
    if gpu_spec is not None:
        fields[5] = gpu_spec
    trace = tmp_path / "one_pod_list.csv"
    trace.write_text(f"{lines[0]}\n{','.join(fields)}\n")
    code, text, _ = run_main(["simulate", "--trace", str(trace), "--gpus", "p100=8,v100=8",
                              "--data-dir", str(shared_data), "--out", str(tmp_path / "out"),
                              "--no-plots", "--json"], capsys)
    assert code == 0
    metrics: dict[str, Any] = json.loads(text)["metrics"]
    return metrics


def test_a_constrained_pod_alone_on_its_type_has_rho_1(
        tmp_path: Path, shared_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    metrics = _alone(tmp_path, shared_data, capsys)
    assert metrics["avg_wait_s"] == 0.0 and metrics["jobs_by_type"] == {"p100": 1}
    assert metrics["rho_max"] == pytest.approx(1.0)
    assert metrics["rho_gt1_share"] == 0.0


def test_an_unconstrained_job_is_still_measured_against_the_fastest_type(
        tmp_path: Path, shared_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same pod without its gpu_spec may use the V100s: placed on a P100, rho > 1."""
    metrics = _alone(tmp_path, shared_data, capsys, gpu_spec="")
    assert metrics["jobs_by_type"] == {"p100": 1}
    assert metrics["rho_max"] > 1.1
