"""Optional PNG plot of a fairness report (matplotlib imported lazily)."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from slurm_hase.errors import ConfigError, OptionalDependencyError
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
    """Stacked GPU-hours by type per account, with share vs entitlement markers.

    ConfigError names the path when it cannot be written (no such folder, no permission,
    a format matplotlib does not know).
    """
    plt = _pyplot()
    fig = _draw(plt, report)
    try:
        fig.savefig(path)
    except OSError as exc:
        raise ConfigError(f"cannot write --plot {path}: {exc.strerror or exc}") from None
    except ValueError as exc:  # unknown format, e.g. --plot chart.xyz
        raise ConfigError(f"cannot write --plot {path}: {exc}") from None
    finally:
        plt.close(fig)
    return path


def _draw(plt: Any, report: FairnessReport) -> Any:
    """The figure: GPU-hours by type (left), share vs entitlement (right)."""
    names = [r.account for r in report.accounts]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    bottom = [0.0] * len(names)
    for gpu_type in report.gpu_types:
        hours = [r.gpu_hours.get(gpu_type, 0.0) for r in report.accounts]
        left.bar(names, hours, bottom=bottom, label=gpu_type)
        bottom = [b + h for b, h in zip(bottom, hours, strict=True)]
    left.set_ylabel("GPU-hours")
    if report.gpu_types:  # no GPU time, no bars: legend() would warn on the terminal
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
    return fig
