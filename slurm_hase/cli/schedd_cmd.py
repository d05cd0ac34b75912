"""`hase schedd`: run and manage the scheduler daemon (thin layer over slurm_hase.daemon)."""

from __future__ import annotations

import json
import logging
import os
import shlex
import signal
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from slurm_hase.cli.schedd_checks import (
    existing_store,
    slurm_job_id,
    state_folder,
    textfile_folder,
    unit_exec,
    unit_sandbox_warnings,
    unit_slurm_conf,
)
from slurm_hase.cli.schedd_view import model_info, status_lines
from slurm_hase.cli.slurm_env import check_slurm_conf
from slurm_hase.daemon.config import DaemonConfig, load_config
from slurm_hase.errors import ConfigError, SlurmError

if TYPE_CHECKING:
    from slurm_hase.daemon.cycle import CycleResult

DEFAULT_CONFIG = "/etc/slurm-hase/schedd.toml"  # where render-unit's service looks by default
CONFIG_OPT = click.option(
    "--config", "config_path", type=click.Path(dir_okay=False), default=None,
    envvar="HASE_SCHEDD_CONFIG", show_envvar=True,
    help=f"TOML config. Default: {DEFAULT_CONFIG} when it exists, else built-in defaults "
         "(template: schedd.toml.example, installed in <prefix>/share/slurm-hase/templates/; "
         "templates/ in a checkout).")
DB_OPT = click.option("--state-db", default=None, help="State store path (overrides config).")


def _config(path: str | None, state_db: str | None = None) -> DaemonConfig:
    """--config, else DEFAULT_CONFIG when that file exists (the service's config: `status`,
    `job` and `reset` then read the daemon's store without --config), else the defaults."""
    if path is None and Path(DEFAULT_CONFIG).is_file():
        path = DEFAULT_CONFIG
    cfg = load_config(path)
    return replace(cfg, state_db=state_db) if state_db else cfg


def _hold_store(state_db: str) -> None:
    """Hold the state store exclusively until the command ends, however it ends;
    DaemonRunningError naming the pid while another daemon holds it."""
    from slurm_hase.store.lock import StoreLock

    click.get_current_context().call_on_close(StoreLock(state_db).close)


def _backend() -> Any:
    from slurm_hase.slurm.command_backend import CommandBackend
    from slurm_hase.slurm.runner import SubprocessRunner

    return CommandBackend(SubprocessRunner())


def _preflight(backend: Any, cfg: DaemonConfig) -> None:
    """Check the config against the cluster once: a `hase: warning:` line per warning,
    ConfigError (exit 2) naming the fatal problems. Skipped (logged) when Slurm is away."""
    from slurm_hase.daemon.preflight import run_preflight

    problems = run_preflight(backend, cfg)
    for p in problems:
        if not p.fatal:
            click.echo(f"hase: warning: {p}", err=True)
    fatal = [str(p) for p in problems if p.fatal]
    if fatal:
        raise ConfigError("; ".join(fatal))


@click.group(name="schedd")
def schedd() -> None:
    """Run and manage the scheduler daemon (decides GPU type and order of pending jobs)."""


@schedd.command(name="policies")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable: name, summary, knobs with defaults.")
def policies_cmd(as_json: bool) -> None:
    """List the scheduling policies with their knobs (defaults; set them under [policy.knobs]
    in the daemon's config, or with `hase simulate --knob NAME=VALUE`).

    \b
    Examples:
      hase schedd policies
      hase schedd policies --json
    """
    from slurm_hase.policy.registry import list_policies, policy_knobs

    rows = [(name, summary, dict(sorted(policy_knobs(name).items()))) for name, summary in list_policies()]
    if as_json:
        click.echo(json.dumps([{"name": n, "summary": s, "knobs": k} for n, s, k in rows], indent=2))
        return
    for name, summary, knob_map in rows:
        knobs = ", ".join(f"{k}={v:g}" for k, v in knob_map.items())
        click.echo(f"{name:<7} {summary}" + (f"  [knobs: {knobs}]" if knobs else ""))


@schedd.command(name="run")
@click.option("--once", is_flag=True, help="Run one cycle and exit.")
@click.option("--dry-run", is_flag=True,
              help="Print the updates it would make; nothing changes in Slurm (the cycles and "
                   "their planned decisions are still recorded in the state store).")
@click.option("--interval", type=click.FloatRange(min=1.0), default=None,
              help="Seconds between cycles (overrides config).")
@CONFIG_OPT
@DB_OPT
def run_cmd(once: bool, dry_run: bool, interval: float | None, config_path: str | None,
            state_db: str | None) -> None:
    """Observe -> decide -> act -> record, every interval.

    It sets only Nice and a GPU-type Features constraint on pending jobs (and requeues
    opted-in jobs when the config turns requeue on); Slurm still starts every job.
    `hase schedd reset` takes its attributes off again.

    \b
    Examples:
      hase schedd run --once --dry-run --config /etc/slurm-hase/schedd.toml   # what it would do
      hase schedd run --once --config /etc/slurm-hase/schedd.toml             # one real cycle
      hase schedd run --config /etc/slurm-hase/schedd.toml   # as the systemd unit runs it
      (docs/daemon.md: the config, the policies, what happens when slurmctld is down)
    """
    check_slurm_conf(os.environ)
    from slurm_hase.cli.schedd_run import build_daemon, cycle_lines, reload_daemon
    from slurm_hase.daemon.logs import setup_logging
    from slurm_hase.daemon.loop import WallClock
    from slurm_hase.daemon.metrics import Metrics, serve_metrics
    from slurm_hase.store.lock import holder

    used = config_path or (DEFAULT_CONFIG if Path(DEFAULT_CONFIG).is_file() else None)

    def load() -> DaemonConfig:  # at start and at each SIGHUP, from the file the start read
        cfg = _config(used, state_db)  # (DEFAULT_CONFIG gone since: an error, not defaults)
        cfg = replace(cfg, dry_run=True) if dry_run else cfg
        return replace(cfg, interval_s=interval) if interval is not None else cfg

    cfg = load()
    # a dry run beside the running daemon leaves the metrics (port, textfile) to it
    daemon_pid = holder(cfg.state_db) if cfg.dry_run else None
    if daemon_pid is not None and (cfg.metrics_port or cfg.metrics_textfile):
        click.echo(f"hase: note: a daemon{f' (pid {daemon_pid})' if daemon_pid else ''} runs on "
                   f"{cfg.state_db}; this dry run serves and writes no metrics", err=True)
    serve, textfile = daemon_pid is None and cfg.metrics_port > 0, (
        cfg.metrics_textfile if daemon_pid is None else None)
    if textfile:
        textfile_folder(textfile)
    state_folder(cfg.state_db)
    # one daemon per store, held until this process ends; a dry run changes nothing in Slurm
    # and may look on beside the running daemon
    if not cfg.dry_run:
        _hold_store(cfg.state_db)
    metrics = Metrics()
    if serve:  # before the store is written: a port in use refuses the start
        serve_metrics(metrics, cfg.metrics_address, cfg.metrics_port)
    setup_logging(cfg.log_format, cfg.log_level)
    backend, clock = _backend(), WallClock()
    _preflight(backend, cfg)
    daemon = build_daemon(cfg, backend, clock, metrics)
    stop, running = {"flag": False, "reload": False}, [cfg]

    def on_signal(signum: int, _frame: object) -> None:
        stop["reload" if signum == signal.SIGHUP else "flag"] = True

    def should_stop() -> bool:  # checked between cycles: a reload is taken there too
        if stop["reload"] and not stop["flag"]:
            stop["reload"] = False
            running[0] = reload_daemon(daemon, running[0], load)
        return stop["flag"]

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # SIGHUP: reload the config
        signal.signal(sig, on_signal)
    shown: list[CycleResult] = []  # the cycle printed last: a failed cycle leaves it in place

    def after() -> None:
        if textfile:
            try:
                metrics.write_textfile(textfile, make_parents=False)
            except OSError as exc:  # the cycles go on; the error is logged and counted
                metrics.inc("hase_schedd_errors_total", kind="metrics")
                logging.getLogger("slurm_hase.daemon").error(
                    "cannot write metrics textfile %s: %s", textfile, exc.strerror or exc)
        res = daemon.last_result
        # a cycle that could not observe Slurm (backing off) has no result of its own: printing
        # the last one again would read as a new cycle that planned the same updates
        if res is None or not (cfg.dry_run or once) or (shown and shown[-1] is res):
            return
        shown[:] = [res]
        for line in cycle_lines(res, daemon.policy.name, cfg.dry_run):
            click.echo(line)

    daemon.run(once=once, should_stop=should_stop, after_cycle=after)
    if once and daemon.failures:  # Slurm's words: not every failure is slurmctld being away
        raise SlurmError(f"no cycle completed: {daemon.last_failure}")


@schedd.command(name="status")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--cycles", type=click.IntRange(min=0), default=5, show_default=True,
              help="How many recent cycles.")
@CONFIG_OPT
@DB_OPT
def status_cmd(as_json: bool, cycles: int, config_path: str | None, state_db: str | None) -> None:
    """Recent cycles, jobs we hold attributes on, and the model in use.

    \b
    Examples:
      hase schedd status --config /etc/slurm-hase/schedd.toml
      hase schedd status --json --cycles 50 --state-db /var/lib/slurm-hase/schedd.db
    """
    from slurm_hase.store.lock import holder

    cfg = _config(config_path, state_db)
    store = existing_store(cfg)
    recent = store.cycles(max(cycles, 1))  # newest first; the newest also when --cycles 0
    # "policy" is the config file's; the daemon runs the one it read at start or last reload
    data = {"state_db": cfg.state_db, "policy": cfg.policy, "cycles": recent[:cycles],
            "last_cycle_policy": recent[0]["policy"] if recent else None,
            "daemon_pid": holder(cfg.state_db),
            "owned_jobs": len(store.owned()), "model": model_info(store.latest_model()),
            "usage": (store.latest_usage() or {}).get("usage", {}),
            "last_observed": store.last_observed()}
    if as_json:
        click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
        return
    for line in status_lines(data):
        click.echo(line)
    if not data["cycles"] and cycles:  # --cycles 0 asks for none, whatever the store holds
        click.echo("  no cycles recorded yet")


@schedd.command(name="job")
@click.argument("job_id", callback=slurm_job_id)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True,
              help="How many of the newest decisions.")
@CONFIG_OPT
@DB_OPT
def job_cmd(job_id: str, as_json: bool, limit: int, config_path: str | None,
            state_db: str | None) -> None:
    """What the daemon did to one job, and why: Nice, GPU-type constraint and requeues it
    decided, with the policy's reason and Slurm's answer, newest first.

    Records older than history_days (config, default 30) are dropped.

    \b
    Examples:
      hase schedd job 4242 --config /etc/slurm-hase/schedd.toml
      hase schedd job 4242 --json --limit 100
    """
    cfg = _config(config_path, state_db)
    store = existing_store(cfg)
    rows = store.job_history(job_id, limit)
    held = store.owned().get(job_id)
    if as_json:
        click.echo(json.dumps({"job_id": job_id, "decisions": rows,
                               "holds": None if held is None
                               else {"nice": held[0], "features": held[1]}},
                              indent=2, sort_keys=True))
        return
    if not rows:
        click.echo(f"job {job_id}: no decision recorded in {cfg.state_db} (the daemon never "
                   "changed it, or the record is older than history_days)")
        return
    if held is not None:
        click.echo(f"job {job_id}: pending or running at the last cycle, with the Nice {held[0]} and Features "
                   f"{held[1] or '-'} the daemon last set (a change by the user is kept)")
    click.echo(f"{'when':19s}  {'action':7s}  {'nice':>11s}  {'features':14s}  {'outcome':8s}  "
               "reason / Slurm's answer")
    for r in rows:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["started"]))
        nice = "-" if r["nice"] is None else str(r["nice"])
        said = r["reason"] + (f"  [{r['answer']}]" if r["answer"] not in ("", "ok") else "")
        click.echo(f"{when:19s}  {r['action']:7s}  {nice:>11s}  {r['features'] or '-':14s}  "
                   f"{r['outcome'] + (' DRY' if r['dry_run'] else ''):8s}  {said}")


@schedd.command(name="reset")
@click.option("--dry-run", is_flag=True, help="Show what would be removed.")
@click.option("--json", "as_json", is_flag=True,
              help="Machine-readable: each job's outcome (reset, unchanged, kept, gone, error, "
                   "planned), detail and scontrol command, and the error count.")
@CONFIG_OPT
@DB_OPT
def reset_cmd(dry_run: bool, as_json: bool, config_path: str | None,
              state_db: str | None) -> None:
    """Put back the Nice/Features of pending jobs we touched (user changes are kept).

    Nice goes back to 0 and Features to the constraint hsbatch added at submission (recorded
    in the job's description), or to none. A running job's are kept and put back once it
    pends again (a later reset). Exit 1 when a job could not be reset (it stays recorded).

    \b
    Examples:
      hase schedd reset --dry-run --config /etc/slurm-hase/schedd.toml   # list what it would undo
      hase schedd reset --config /etc/slurm-hase/schedd.toml
      hase schedd reset --json --config /etc/slurm-hase/schedd.toml | jq '.jobs[] | select(.outcome == "error")'
    """
    from slurm_hase.daemon.cycle import OwnedAttrs
    from slurm_hase.daemon.reset import reset_decisions

    check_slurm_conf(os.environ)
    cfg = _config(config_path, state_db)
    store = existing_store(cfg)
    # a running daemon would put the attributes back at its next cycle: refuse while one runs
    if not dry_run:
        _hold_store(cfg.state_db)
        click.get_current_context().call_on_close(store.close)  # after `forget`, before the lock
    owned = {j: OwnedAttrs(*row) for j, row in store.owned_rows().items()}
    outcomes = reset_decisions(_backend(), owned, dry_run=dry_run)
    from slurm_hase.slurm import commands

    if not dry_run:
        store.forget(o.job_id for o in outcomes if o.outcome in ("reset", "gone", "unchanged"))
    errors = sum(1 for o in outcomes if o.outcome == "error")
    if as_json:
        rows = [{"job_id": o.job_id, "outcome": o.outcome, "detail": o.detail,
                 "command": (commands.update_job(o.job_id, o.update)
                             if o.update is not None and o.outcome in ("planned", "reset", "error")
                             else None)} for o in outcomes]
        click.echo(json.dumps({"dry_run": dry_run, "jobs": rows, "errors": errors}, indent=2))
    else:
        for o in outcomes:
            if o.outcome == "planned" and o.update is not None:
                click.echo("would run: " + shlex.join(commands.update_job(o.job_id, o.update)))
            else:
                click.echo(f"{o.job_id}: {o.outcome}" + (f" ({o.detail})" if o.detail else ""))
        click.echo(f"{len(outcomes)} jobs, {errors} errors")
    if errors:
        raise SlurmError(f"{errors} jobs could not be reset (kept in the store)")


@schedd.command(name="render-unit")
@CONFIG_OPT
@click.option("--user", default="root", show_default=True,
              help="User= of the service (a user name or numeric UID).")
@click.option("--slurm-conf", default=None,
              help="SLURM_CONF for the service (an existing file; default: this shell's "
                   "$SLURM_CONF where it is set, else none: Slurm's built-in path).")
@click.option("--exec", "exec_start", default=None,
              help="The `hase` executable: an absolute path, or a name found on PATH.")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None)
def render_unit_cmd(config_path: str | None, user: str, slurm_conf: str | None,
                    exec_start: str | None, output: str | None) -> None:
    """Print (or write) the systemd unit for the daemon.

    \b
    Examples:
      hase schedd render-unit --config /etc/slurm-hase/schedd.toml --slurm-conf /etc/slurm/slurm.conf \\
          -o /etc/systemd/system/hase-schedd.service && systemctl daemon-reload
    """
    from slurm_hase.daemon.unit import render_unit, write_unit

    cfg_path = config_path or DEFAULT_CONFIG
    cfg = load_config(config_path) if config_path else None  # refuse a broken config
    from_env = slurm_conf is None and bool(os.environ.get("SLURM_CONF"))
    if from_env:
        slurm_conf = unit_slurm_conf(os.environ["SLURM_CONF"], "SLURM_CONF")
    elif slurm_conf is not None:
        slurm_conf = unit_slurm_conf(slurm_conf)
    text = render_unit(config_path=cfg_path,
                       exec_start=unit_exec(exec_start) if exec_start is not None else None,
                       user=user, slurm_conf=slurm_conf)
    if output:
        write_unit(output, text)
    else:
        click.echo(text, nl=False)
    if not config_path and not Path(cfg_path).exists():
        click.echo(f"hase: warning: {cfg_path} does not exist; the service will not start "
                   "until it does (--config names another file)", err=True)
    if from_env:
        click.echo(f"hase: note: the unit sets SLURM_CONF={slurm_conf}, taken from this shell "
                   "(--slurm-conf names another file)", err=True)
    for line in unit_sandbox_warnings(str(Path(cfg_path).absolute()), cfg):
        click.echo(f"hase: warning: {line}", err=True)
