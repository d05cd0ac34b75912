"""Plots of simulation runs (matplotlib, imported lazily; a clear error when missing)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from slurm_hase.errors import ConfigError
from slurm_hase.sim.engine import SimResult
from slurm_hase.sim.metrics import jain, level_series


def _plt() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("plots need matplotlib: pip install matplotlib (or pass --no-plots)") from None
    return plt


def check_matplotlib() -> None:
    """The ConfigError plot_runs would raise without matplotlib, raised now: `hase simulate`
    calls it before simulating, so a missing extra costs no run and writes nothing."""
    _plt()


def _jcts(result: SimResult) -> np.ndarray[Any, Any]:
    return np.sort(np.array([j.end - j.trace.submit_s for j in result.jobs if j.end >= 0 and j.start >= 0]))


def plot_runs(results: Mapping[str, SimResult], out: Path, fmt: str = "png") -> list[Path]:
    """JCT CDF, queue length, utilisation by type over time and fairness over time
    (plot_fairness); one figure each."""
    plt = _plt()
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, res in results.items():
        jct = _jcts(res) / 3600.0
        if len(jct):
            ax.plot(jct, np.arange(1, len(jct) + 1) / len(jct), label=name)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (h)")
    ax.set_ylabel("fraction of jobs")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    paths.append(_save(plt, fig, out / f"jct_cdf.{fmt}"))
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, res in results.items():
        ax.plot([s.t / 3600 for s in res.samples], [s.pending for s in res.samples], label=name)
    ax.set_xlabel("time (h)")
    ax.set_ylabel("pending jobs")
    ax.legend(fontsize=7)
    paths.append(_save(plt, fig, out / f"queue_length.{fmt}"))
    first = next(iter(results.values()), None)
    if first is not None:
        types = list(first.gpus_by_type)
        fig, axes = plt.subplots(len(types), 1, figsize=(6, 2 + 1.5 * len(types)), sharex=True,
                                 squeeze=False)
        for ax, t in zip(axes[:, 0], types, strict=True):
            for name, res in results.items():
                cap = res.gpus_by_type[t]
                ax.plot([s.t / 3600 for s in res.samples],
                        [s.busy.get(t, 0.0) / cap for s in res.samples], label=name)
            ax.set_ylabel(f"{t} util")
            ax.set_ylim(0, 1.05)
        axes[-1, 0].set_xlabel("time (h)")
        axes[0, 0].legend(fontsize=7)
        paths.append(_save(plt, fig, out / f"utilisation.{fmt}"))
        paths.append(plot_fairness(results, out / f"fairness.{fmt}"))
    return paths


def plot_fairness(results: Mapping[str, SimResult], path: Path, accounts: int = 6) -> Path:
    """Jain's index over accounts at every contended sample, one line per policy; below it, per
    policy, the level (service / entitlement) of the `accounts` accounts with most jobs."""
    plt = _plt()
    fig, axes = plt.subplots(1 + len(results), 1, figsize=(7, 2.6 + 2.0 * len(results)),
                             sharex=True, squeeze=False)
    contended = False
    for k, (name, res) in enumerate(results.items(), start=1):
        total = float(sum(res.gpus_by_type.values()))
        series = list(level_series(res.samples, total, res.shares))
        contended = contended or bool(series)
        hours = [t / 3600.0 for t, _ in series]
        axes[0, 0].plot(hours, [jain(list(lv.values())) for _, lv in series], ".-", ms=3,
                        lw=0.6, label=name)
        jobs: dict[str, int] = {}
        for j in res.jobs:
            jobs[j.trace.account] = jobs.get(j.trace.account, 0) + 1
        ax = axes[k, 0]
        for acct in sorted(jobs, key=lambda a: (-jobs[a], a))[:accounts]:
            ax.plot(hours, [lv.get(acct, np.nan) for _, lv in series], ".-", ms=2, lw=0.5,
                    label=f"{acct} ({jobs[acct]} jobs)")
        ax.axhline(1.0, color="k", linewidth=0.5)
        ax.set_ylabel(f"{name}: level")
        ax.legend(fontsize=6, ncol=2)
    if not contended:
        axes[0, 0].text(0.5, 0.5, "never contended between accounts: no sample to judge",
                        ha="center", va="center", transform=axes[0, 0].transAxes)
    axes[0, 0].axhline(0.95, color="k", linestyle="--", linewidth=0.8)
    axes[0, 0].set_ylabel("Jain over accounts")
    axes[0, 0].set_title("while contended (some job pending, >= 2 accounts with jobs)", fontsize=8)
    axes[0, 0].legend(fontsize=7)
    axes[-1, 0].set_xlabel("time (h)")
    path.parent.mkdir(parents=True, exist_ok=True)
    return _save(plt, fig, path)


def plot_bench(rows: Sequence[Mapping[str, Any]], path: Path, title: str = "") -> Path:
    """Bars per policy (bench/policies): average JCT, p99 rho (log scale) and Jain over accounts,
    instantaneous beside per day when the rows have it, with the 0.95 target drawn."""
    plt = _plt()
    names = [str(r["policy"]) for r in rows]
    xs = list(range(len(rows)))
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    axes[0].bar(xs, [float(r["avg_jct_s"]) / 3600.0 for r in rows])
    axes[0].set_title("avg JCT (h)")
    axes[1].bar(xs, [float(r["rho_p99"]) for r in rows])
    axes[1].set_yscale("log")
    axes[1].set_title("p99 finish-time fairness rho (log)")
    per_day = all("jain_accounts_1d" in r for r in rows)
    width = 0.4 if per_day else 0.8
    def jain_of(r: Mapping[str, Any], key: str) -> float:  # None (never contended): no bar
        return float("nan") if r.get(key) is None else float(r[key])

    axes[2].bar([x - (width / 2 if per_day else 0.0) for x in xs],
                [jain_of(r, "jain_accounts") for r in rows], width, label="every 10 min")
    if per_day:
        axes[2].bar([x + width / 2 for x in xs], [jain_of(r, "jain_accounts_1d") for r in rows],
                    width, label="per day")
        axes[2].legend(fontsize=7, loc="lower center", ncol=2, framealpha=0.9)
    axes[2].axhline(0.95, color="k", linestyle="--", linewidth=0.8)
    lowest = min((float(r[k]) for r in rows for k in ("jain_accounts", "jain_accounts_1d")
                  if r.get(k) is not None), default=0.5)
    axes[2].set_ylim(min(0.5, lowest - 0.05), 1.0)
    axes[2].set_title("Jain over accounts (target 0.95)")
    for ax in axes:
        ax.set_xticks(xs, names, rotation=45, ha="right", fontsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    return _save(plt, fig, path)


def _save(plt: Any, fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
