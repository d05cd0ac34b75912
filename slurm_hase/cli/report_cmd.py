"""`hase report fairness|usage`: GPU usage and fairness per account and user, from sacct."""

from __future__ import annotations

import getpass
import importlib
import json
import os
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from slurm_hase.cli.slurm_env import check_slurm_conf
from slurm_hase.errors import ConfigError, SlurmError, SlurmTimeoutError
from slurm_hase.reports.fairness import (
    FairnessReport,
    fairness_report,
    node_gpu_types,
)
from slurm_hase.reports.format import fairness_table, usage_table
from slurm_hase.reports.queue import with_queue
from slurm_hase.reports.views import only_accounts
from slurm_hase.reports.weights import (
    catalog_weights,
    check_weights,
    parse_pairs,
    parse_weights,
)
from slurm_hase.reports.window import FORMS, overlaps, stamp, window
from slurm_hase.slurm.backend import SlurmBackend
from slurm_hase.slurm.tres import node_mps_per_gpu, node_shards_per_gpu
from slurm_hase.slurm.types import AccountingRecord, Job

SINCE, UNTIL = "now-7days", "now"  # the default window
TIMEOUT_S = 300.0  # each Slurm command's; sacct over a month of a big site can take minutes


def _cannot_tell() -> set[str] | None:
    return None


@dataclass(frozen=True)
class Inputs:
    """What the report needs from Slurm (or from a saved sacct --json file)."""

    records: list[AccountingRecord]
    shares: dict[str, float] | None
    node_types: dict[str, str]
    queue: list[Job] | None = None  # squeue's jobs (live mode), for "pending now"
    # every account Slurm knows (sacctmgr), asked only when a warning needs it; None: cannot
    # tell (a saved file, sacctmgr failing). Not the shares' keys: those lack root (when no
    # user sits directly under it) and accounts whose fairshare is `parent` and that have no
    # users
    known_accounts: Callable[[], set[str] | None] = _cannot_tell
    node_mps: dict[str, int] = field(default_factory=dict)  # node -> MPS count of one GPU
    node_shards: dict[str, float] = field(default_factory=dict)  # node -> shards of one GPU


def _backend(timeout_s: float) -> Any:
    """The command backend over a SubprocessRunner (SLURM_CONF from the environment), each
    command given `timeout_s`."""
    from slurm_hase.slurm.runner import SubprocessRunner

    module = importlib.import_module("slurm_hase.slurm.command_backend")
    return module.CommandBackend(SubprocessRunner(), timeout_s=timeout_s)


def _live(since: str, until: str, timeout_s: float = TIMEOUT_S, cluster: str | None = None,
          since_option: str = SINCE) -> Inputs:
    """Records, shares, nodes and queue from Slurm; with `cluster`, that cluster's records and
    shares, and neither this cluster's nodes nor its queue (pending jobs come from sacct)."""
    check_slurm_conf(os.environ)
    backend = _backend(timeout_s)
    where = {"cluster": cluster} if cluster else {}
    try:
        records = backend.accounting(since=since, until=until, **where)
    except SlurmTimeoutError as exc:
        raise SlurmError(f"{exc.argv[0]} did not answer within {exc.timeout_s:g}s (--timeout): "
                         "a long window of a busy cluster can take longer; allow more with "
                         f"--timeout SECONDS, or ask for a shorter window than --since "
                         f"{since_option}") from exc
    if cluster and not records:
        click.echo(f"hase: warning: --cluster {cluster}: sacct has no jobs of it in this window "
                   "(nor of a cluster not in Slurm's database)", err=True)
    try:
        shares: dict[str, float] | None = dict(backend.account_shares(**where))
    except SlurmError as exc:
        click.echo(f"hase: warning: sacctmgr failed ({exc}); no entitlements: ratios are left "
                   "out and Jain's index is over normalised GPU-hours", err=True)
        shares = None
    try:
        nodes = [] if cluster else backend.nodes()
    except SlurmError:
        nodes = []
    node_types, node_mps = node_gpu_types(nodes), node_mps_per_gpu(nodes)
    try:
        queue: list[Job] | None = None if cluster else list(backend.jobs())
    except SlurmError as exc:
        click.echo(f"hase: warning: squeue failed ({exc}); pending jobs counted from sacct, "
                   "which leaves out held ones", err=True)
        queue = None
    return Inputs(list(records), shares, node_types, queue,
                  lambda: _slurm_accounts(backend, where), node_mps, node_shards_per_gpu(nodes))


def _slurm_accounts(backend: SlurmBackend, where: Mapping[str, str]) -> set[str] | None:
    """The accounts of the reported cluster (root and `parent`-share accounts too, which
    account_shares() leaves out); None when sacctmgr cannot tell."""
    try:
        return backend.accounts(**where)
    except SlurmError:
        return None


def _from_file(path: Path) -> Inputs:
    from slurm_hase.reports.saved import read_saved_sacct

    return Inputs(read_saved_sacct(path, "--input"), None, {})


def _shares(text: str) -> dict[str, float]:
    """--shares a=2,b=1; ConfigError names the bad item (shares are numbers >= 0)."""
    return parse_pairs(text, what="--shares item", key="ACCOUNT", example="teama=2")


def _saved_window(since: str | None, until: str | None, at: float) -> tuple[int, int] | None:
    """A saved file's window: none unless --since or --until is given; then a missing --since
    leaves the start open, a missing --until is now."""
    if since is None and until is None:
        return None
    return window(since, UNTIL if until is None else until, at)


def _one_cluster(cluster: str | None, input_path: Path | None) -> str | None:
    """--cluster: one cluster name (sacct -M takes lists and `all`); ConfigError otherwise or
    with --input (a saved file holds what it holds)."""
    if cluster is None:
        return None
    name = cluster.strip()
    if not name or "," in name or " " in name or name.lower() in ("all", "-1"):
        raise ConfigError(f"--cluster takes one cluster name, not {cluster!r}: a report is of "
                          "one cluster")
    if input_path is not None:
        raise ConfigError("--cluster is for reports from Slurm; --input reads the saved file "
                          "as it is")
    return name


def build_report(since: str | None, until: str | None, accounts: str, weights: str,
                 shares: str | None, input_path: Path | None,
                 now: float | None = None, timeout_s: float = TIMEOUT_S,
                 cluster: str | None = None) -> FairnessReport:
    """Check the options, fetch records (sacct is asked for exactly the window clipped to; a
    saved file's records are kept to it), derive weights, compute over every account, then keep
    the rows of the --account ones: their shares, entitlements, the weights, the totals and
    Jain's index stay those of all accounts, and node GPU types are guessed from all records
    (a saved file's whole content), so what --account or the window selects changes none of
    them."""
    share_map = _shares(shares) if shares else None
    cluster = _one_cluster(cluster, input_path)
    weight_map = None if weights in ("none", "catalog") else parse_weights(weights)
    at = time.time() if now is None else now
    clip: tuple[int, int] | None
    if input_path is None:
        clip = live = window(SINCE if since is None else since, UNTIL if until is None else until,
                            at)  # a bad value is refused before sacct runs
        inputs = _live(stamp(live[0]), stamp(live[1]), timeout_s, cluster,
                       SINCE if since is None else since)
        found = inputs.records
        if inputs.queue is not None:
            found = with_queue(found, inputs.queue, live[1])
    else:
        clip = _saved_window(since, until, at)
        inputs = _from_file(input_path)
        found = [r for r in inputs.records if clip is None or overlaps(r, clip)]
    wanted = {a.strip() for a in accounts.split(",") if a.strip()}
    with_jobs = {r.account for r in found}
    _warn_without_jobs("--account", wanted, with_jobs,
                       inputs.known_accounts() if wanted - with_jobs else None)
    if share_map is None:
        share_map = inputs.shares
    guess_from = inputs.records if input_path is not None else found
    # a job still running counts to when sacct was asked; a saved file does not say when
    queried_at = at if input_path is None else None

    def make(w: dict[str, float] | None) -> FairnessReport:
        return fairness_report(found, speed_weights=w, shares=share_map,
                               node_types=inputs.node_types, window=clip, guess_from=guess_from,
                               node_mps=inputs.node_mps, queried_at=queried_at,
                               node_shards=inputs.node_shards)

    types = make(None).gpu_types
    if weights == "none":
        rep = make(dict.fromkeys(types, 1.0))
    elif weight_map is None:
        rep = make(catalog_weights(types))
    else:
        rep = make(check_weights(weight_map, types))
    return only_accounts(rep, wanted) if wanted else rep


def _warn_without_jobs(option: str, wanted: set[str], with_jobs: set[str],
                      known: Collection[str] | None = None, within: str = "") -> None:
    """A `hase: warning:` line per --account/--user value that has no job in the window (a
    typo, or someone quiet), saying whether Slurm knows it at all when `known` can tell; the
    report itself goes on. `within`: the --account value `with_jobs` was limited to."""
    have = ", ".join(sorted(with_jobs)) or "none"
    noun = option.removeprefix("--")
    where = f" in --account {within}" if within else ""
    for name in sorted(wanted - with_jobs):
        why = (f"is not an {noun} Slurm knows" if known is not None and name not in known
               else f"has no jobs{where} in this window")
        click.echo(f"hase: warning: {option} {name} {why} ({noun}s with jobs"
                   f"{' there' if where else ''}: {have})", err=True)


def _options(func: Callable[..., None]) -> Callable[..., None]:
    opts = [
        click.option("--since", default=None,
                     help=f"Window start (sacct -S) [default: {SINCE}; with --input: open]. "
                          f"Forms: {FORMS}."),
        click.option("--until", default=None,
                     help=f"Window end (sacct -E), same forms [default: {UNTIL}]. Run time is "
                          "clipped to the window; with --input, only when --since or --until is "
                          "given, and jobs outside it are left out."),
        click.option("--account", "accounts", default="",
                     help="Only these accounts' rows (comma list). Shares, entitlements, totals "
                          "and Jain's index stay those of all accounts (teamb's entitlement is "
                          "its part of every account's shares)."),
        click.option("--weights", default="catalog", show_default=True,
                     help="Speed weights: catalog (FP16 peak vs fastest), none (all 1), or "
                          "a100=1,t4=0.2 (GPU catalog names or types in the data; types not given weigh 1)."),
        click.option("--shares", default=None,
                     help="Entitlements ACCOUNT=SHARES,... (default: sacctmgr fairshare)."),
        click.option("--input", "input_path", type=click.Path(dir_okay=False, path_type=Path),
                     default=None, help="Read a saved `sacct --json -a -D` file instead of Slurm."),
        click.option("--timeout", "timeout_s", type=click.FloatRange(min=1.0),
                     default=TIMEOUT_S, show_default=True,
                     help="Seconds to wait for each Slurm command; sacct over a long window "
                          "of a busy cluster can take minutes."),
        click.option("--cluster", default=None,
                     help="Report this cluster of a multi-cluster Slurm database (sacct -M, "
                          "sacctmgr cluster=; pending jobs from sacct) [default: this cluster, "
                          "sacct --local]."),
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
@click.option("--user", "users", default="",
              help="Only these users' rows (comma list; 'me' = you) and their accounts' rows, "
                   "which still count every user's jobs.")
def usage_cmd(since: str | None, until: str | None, accounts: str, weights: str, shares: str | None,
              input_path: Path | None, timeout_s: float, cluster: str | None, as_json: bool,
              plot_path: Path | None, users: str) -> None:
    """GPU-hours by GPU type per account and user; jobs, pending now, never started, mean wait.

    \b
    Examples:
      hase report usage --since now-30days
      hase report usage --user me --since now-30days     # your jobs beside your accounts' totals
      hase report usage --since 2026-11-01 --until 2026-12-01 --account physics,chem --json
      sacct --json -a -D -S now-7days > saved.json && hase report usage --input saved.json --plot usage.png
    """
    rep = build_report(since, until, accounts, weights, shares, input_path, timeout_s=timeout_s,
                       cluster=cluster)
    wanted = {getpass.getuser() if u.strip() == "me" else u.strip()
              for u in users.split(",") if u.strip()}
    if wanted:
        from slurm_hase.reports.views import only_users

        # rep.users are --account's only: say so, a user with jobs elsewhere is no typo
        _warn_without_jobs("--user", wanted, {u.user for u in rep.users if u.user},
                           within=",".join(rep.only_accounts))
        rep = only_users(rep, wanted)
    full = rep.as_dict()
    data = {k: full[k] for k in ("window", "gpu_types", "speed_weights", "defaulted_weights",
                                 "total_gpu_hours", "total_norm_gpu_hours", "accounts", "users",
                                 "only_accounts", "only_users", "cpu_only_jobs",
                                 "shards_as_whole_gpus")}
    _emit(rep, usage_table(rep, sorted(wanted)), data, as_json, plot_path)


@report.command(name="fairness")
@_options
def fairness_cmd(since: str | None, until: str | None, accounts: str, weights: str, shares: str | None,
                 input_path: Path | None, timeout_s: float, cluster: str | None, as_json: bool,
                 plot_path: Path | None) -> None:
    """Share of normalised GPU-hours vs entitlement per account, Jain's fairness index.

    \b
    Examples:
      hase report fairness                  # the last 7 days, shares from sacctmgr
      hase report fairness --since now-30days --shares physics=2,chem=1 --weights none
      hase report fairness --json --plot fairness.png
    """
    rep = build_report(since, until, accounts, weights, shares, input_path, timeout_s=timeout_s,
                       cluster=cluster)
    for warning in rep.warnings:
        click.echo(f"hase: warning: {warning}", err=True)
    _emit(rep, fairness_table(rep), rep.as_dict(), as_json, plot_path)
