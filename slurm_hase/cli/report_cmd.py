"""`hase report fairness|usage`: GPU usage and fairness per account and user, from sacct."""

from __future__ import annotations

import importlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from slurm_hase.errors import ConfigError, SlurmError
from slurm_hase.reports.fairness import FairnessReport, fairness_report
from slurm_hase.reports.format import fairness_table, usage_table
from slurm_hase.reports.weights import catalog_weights, parse_weights
from slurm_hase.reports.window import window
from slurm_hase.slurm.types import AccountingRecord


@dataclass(frozen=True)
class Inputs:
    """What the report needs from Slurm (or from a saved sacct --json file)."""

    records: list[AccountingRecord]
    shares: dict[str, float] | None
    node_types: dict[str, str]


def _backend() -> Any:
    """The command backend over a SubprocessRunner (SLURM_CONF from the environment)."""
    from slurm_hase.slurm.runner import SubprocessRunner

    module = importlib.import_module("slurm_hase.slurm.command_backend")
    return module.CommandBackend(SubprocessRunner())


def _live(since: str, until: str) -> Inputs:
    backend = _backend()
    records = backend.accounting(since=since, until=until)
    try:
        shares: dict[str, float] | None = dict(backend.account_shares())
    except SlurmError:
        shares = None
    try:
        node_types = {n.name: next(iter(n.gpus)) for n in backend.nodes()
                      if len([t for t in n.gpus if t]) == 1}
    except SlurmError:
        node_types = {}
    return Inputs(list(records), shares, node_types)


def _from_file(path: Path) -> Inputs:
    from slurm_hase.slurm.parse_json_sacct import parse_sacct_json

    try:
        raw = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read --input {path}: {exc.strerror}") from None
    return Inputs(parse_sacct_json(raw), None, {})


def _shares(text: str) -> dict[str, float]:
    try:
        return parse_weights(text)
    except ConfigError:
        raise ConfigError(f"bad --shares {text!r}: expected ACCOUNT=NUMBER,...") from None


def build_report(since: str, until: str, accounts: str, weights: str, shares: str | None,
                 input_path: Path | None, now: float | None = None) -> FairnessReport:
    """Fetch records, filter by account, derive weights, compute the report."""
    inputs = _from_file(input_path) if input_path else _live(since, until)
    wanted = {a.strip() for a in accounts.split(",") if a.strip()}
    records = [r for r in inputs.records if not wanted or r.account in wanted]
    share_map = _shares(shares) if shares else inputs.shares
    if share_map is not None and wanted:
        share_map = {a: v for a, v in share_map.items() if a in wanted}
    clip = window(since, until, time.time() if now is None else now) if not input_path else None

    def make(w: dict[str, float] | None) -> FairnessReport:
        return fairness_report(records, speed_weights=w, shares=share_map,
                               node_types=inputs.node_types, window=clip)

    if weights == "none":
        return make(None)
    if weights == "catalog":
        return make(catalog_weights(make(None).gpu_types))
    return make(parse_weights(weights))


def _options(func: Callable[..., None]) -> Callable[..., None]:
    opts = [
        click.option("--since", default="now-7days", show_default=True,
                     help="Window start (sacct -S): now-7days, 2026-11-01, 2026-11-01T08:00."),
        click.option("--until", default="now", show_default=True, help="Window end (sacct -E)."),
        click.option("--account", "accounts", default="", help="Only these accounts (comma list)."),
        click.option("--weights", default="catalog", show_default=True,
                     help="Speed weights: catalog (FP16 peak vs fastest), none, or a100=1,t4=0.2."),
        click.option("--shares", default=None,
                     help="Entitlements ACCOUNT=SHARES,... (default: sacctmgr fairshare)."),
        click.option("--input", "input_path", type=click.Path(dir_okay=False, path_type=Path),
                     default=None, help="Read a saved `sacct --json -a` file instead of Slurm."),
        click.option("--json", "as_json", is_flag=True, help="Print JSON."),
        click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path),
                     default=None, help="Also write a PNG chart (needs matplotlib)."),
    ]
    for opt in reversed(opts):
        func = opt(func)
    return func


def _emit(report: FairnessReport, text: str, data: dict[str, Any], as_json: bool,
          plot_path: Path | None) -> None:
    if plot_path is not None:
        from slurm_hase.reports.plot import plot_report

        plot_report(report, plot_path)
    click.echo(json.dumps(data, indent=2) if as_json else text)


@click.group(name="report")
def report() -> None:
    """GPU usage and fairness reports from Slurm accounting (sacct)."""


@report.command(name="usage")
@_options
def usage_cmd(since: str, until: str, accounts: str, weights: str, shares: str | None,
              input_path: Path | None, as_json: bool, plot_path: Path | None) -> None:
    """GPU-hours by GPU type per account and user, jobs, mean queue wait."""
    rep = build_report(since, until, accounts, weights, shares, input_path)
    full = rep.as_dict()
    data = {k: full[k] for k in ("window", "gpu_types", "speed_weights", "total_gpu_hours",
                                 "total_norm_gpu_hours", "accounts", "users")}
    _emit(rep, usage_table(rep), data, as_json, plot_path)


@report.command(name="fairness")
@_options
def fairness_cmd(since: str, until: str, accounts: str, weights: str, shares: str | None,
                 input_path: Path | None, as_json: bool, plot_path: Path | None) -> None:
    """Share of normalised GPU-hours vs entitlement per account, Jain's fairness index."""
    rep = build_report(since, until, accounts, weights, shares, input_path)
    _emit(rep, fairness_table(rep), rep.as_dict(), as_json, plot_path)
