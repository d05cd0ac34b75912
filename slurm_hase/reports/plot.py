"""Optional PNG plot of a fairness report (matplotlib imported lazily)."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from slurm_hase.errors import OptionalDependencyError
from slurm_hase.reports.fairness import FairnessReport


def _pyplot() -> Any:
    try:
        matplotlib = importlib.import_module("matplotlib")
        matplotlib.use("Agg")
        return importlib.import_module("matplotlib.pyplot")
    except ImportError:
        raise OptionalDependencyError(
            "--plot needs matplotlib, which is not installed: pip install 'slurm-hase[plot]'"
        ) from None


def plot_report(report: FairnessReport, path: Path) -> Path:
    """Stacked GPU-hours by type per account, with share vs entitlement markers."""
    plt = _pyplot()
    names = [r.account for r in report.accounts]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    bottom = [0.0] * len(names)
    for gpu_type in report.gpu_types:
        hours = [r.gpu_hours.get(gpu_type, 0.0) for r in report.accounts]
        left.bar(names, hours, bottom=bottom, label=gpu_type)
        bottom = [b + h for b, h in zip(bottom, hours, strict=True)]
    left.set_ylabel("GPU-hours")
    left.legend()
    right.bar(names, [100 * r.share for r in report.accounts], label="share")
    entitled = [(n, 100 * r.entitlement) for n, r in zip(names, report.accounts, strict=True)
                if r.entitlement is not None]
    if entitled:
        right.scatter([n for n, _ in entitled], [e for _, e in entitled], color="k", label="entitled")
    right.set_ylabel("% of normalised GPU-hours")
    jain = "-" if report.jain_index is None else f"{report.jain_index:.3f}"
    right.set_title(f"Jain index {jain}")
    right.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
