"""plot_bench: the policy bench's chart."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hase.sim.plots import plot_bench

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
