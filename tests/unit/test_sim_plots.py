"""plot_bench (the policy bench's chart) and plot_runs (hase simulate's figures)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hase.sim.engine import Sample
from slurm_hase.sim.plots import plot_bench, plot_runs
from tests.unit.test_sim_metrics import _done, _result

PNG = b"\x89PNG\r\n\x1a\n"


def _row(policy: str, jain: float, per_day: float | None) -> dict[str, object]:
    row: dict[str, object] = {"policy": policy, "avg_jct_s": 7200.0, "rho_p99": 3.0,
                              "jain_accounts": jain}
    if per_day is not None:
        row["jain_accounts_1d"] = per_day
    return row


@pytest.mark.parametrize("per_day", [None, 0.9])
def test_plot_bench_writes_a_png_with_or_without_per_day_jain(tmp_path: Path,
                                                              per_day: float | None) -> None:
    pytest.importorskip("matplotlib")
    rows = [_row("slurm-fifo", 0.3, per_day), _row("fair", 0.95, per_day)]  # 0.3: below the axis
    out = plot_bench(rows, tmp_path / "sub" / "bench.png", "scenario, seed 0")
    assert out == tmp_path / "sub" / "bench.png"
    assert out.read_bytes()[:8] == PNG


@pytest.mark.parametrize("fmt", ["png", "svg"])
def test_plot_runs_writes_every_figure_fairness_included(tmp_path: Path, fmt: str) -> None:
    pytest.importorskip("matplotlib")
    jobs = [_done(0, "a", 4, 0.0, 0.0, 3600.0), _done(1, "b", 1, 0.0, 600.0, 7200.0)]
    samples = [Sample(0.0, 1, 1, {"v100": 4.0}, {"a": (4.0, 4.0), "b": (0.0, 1.0)}),
               Sample(600.0, 0, 2, {"v100": 5.0}, {"a": (4.0, 4.0), "b": (1.0, 1.0)}),
               Sample(1200.0, 1, 2, {"v100": 5.0}, {"a": (4.0, 4.0), "b": (1.0, 6.0)})]
    runs = {"fifo": _result(jobs, samples), "fair": _result(jobs, samples[:1])}
    paths = plot_runs(runs, tmp_path / "out", fmt)
    assert [p.name for p in paths] == [f"{n}.{fmt}" for n in
                                      ("jct_cdf", "queue_length", "utilisation", "fairness")]
    for path in paths:
        data = path.read_bytes()
        assert data[:8] == PNG if fmt == "png" else b"<svg" in data[:400]
    if fmt == "svg":  # the fairness figure's axis (matplotlib writes text as comments too)
        assert b"Jain over accounts" in paths[-1].read_bytes()
