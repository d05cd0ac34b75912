"""`hase gpu`: probe this node's GPUs (pynvml) and render the MPS prolog/epilog."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import click

from slurm_hase.errors import ConfigError, SlurmError
from slurm_hase.mps import probe as probe_mod
from slurm_hase.mps.render import (
    FAILURE_POLICIES,
    MpsConfig,
    MpsConfigError,
    plugstack_line,
    write_scripts,
)
from slurm_hase.mps.units import MAX_EVERY_MIN, render_units, write_units

# MpsConfig field -> the `hase gpu mps render` option that sets it (errors name the option)
RENDER_OPTIONS = {
    "pipe_dir": "--pipe-dir", "log_dir": "--log-dir", "on_failure": "--on-failure",
    "mps_control": "--mps-control", "log_file": "--log-file", "syslog": "--no-syslog",
    "start_timeout_s": "--start-timeout", "keep_logs": "--keep-logs/--drop-logs",
    "plugin": "--plugin",
}


@click.group(name="gpu")
def gpu() -> None:
    """This node's GPUs: probe them, render the MPS prolog/epilog."""


@gpu.command(name="probe")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--gres", is_flag=True, help="Print suggested gres.conf lines for this node.")
@click.option("--node", default=None, help="Node name for --gres (default: this host's name).")
@click.option("--no-mps", is_flag=True, help="With --gres: leave out the Name=mps line.")
def probe_cmd(as_json: bool, gres: bool, node: str | None, no_mps: bool) -> None:
    """List real NVIDIA GPUs (fails clearly when there is no driver).

    \b
    Examples:
      hase gpu probe                       # index, type key, name, memory, MPS (yes/one/no/?)
      hase gpu probe --json
      hase gpu probe --gres --node gpu-a100-01   # gres.conf + slurm.conf lines for this node
    """
    result = probe_mod.probe()
    if gres:
        name = node or socket.gethostname().split(".")[0]
        lines = probe_mod.gres_lines(result.gpus, name, mps=not no_mps)
        if as_json:
            click.echo(json.dumps({"node": name, "gres_conf": lines}, indent=2))
        else:
            click.echo("\n".join(lines))
        return
    if as_json:
        click.echo(json.dumps(result.as_dict(), indent=2))
        return
    click.echo(f"driver {result.driver_version}")
    header = f"{'idx':>3}  {'type':<10} {'name':<28} {'mem MiB':>8}  {'cc':<4} {'mode':<17} mps  uuid"
    click.echo(header)
    for g in result.gpus:
        cc = "?" if g.compute_capability == probe_mod.UNKNOWN_CC else g.compute_capability
        click.echo(f"{g.index:>3}  {g.type_key:<10} {g.name[:28]:<28} {g.memory_mib:>8}  "
                   f"{cc:<4} {g.compute_mode:<17} {_mps_column(g):<3}  {g.uuid}")
    for g in result.gpus:
        if g.mps_note:
            click.echo(f"note: {g.mps_note}")


def _mps_column(gpu: probe_mod.GpuInfo) -> str:
    """yes: jobs can share it; one: MPS works, one job at a time; ?: not known; no."""
    if gpu.mps_shareable:
        return "yes"
    if gpu.mps_capable:
        return "one"
    return "?" if gpu.compute_capability == probe_mod.UNKNOWN_CC else "no"


@click.group(name="mps")
def mps() -> None:
    """NVIDIA MPS prolog/epilog for GPU sharing."""


@mps.command(name="render")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directory to write hase-mps-{prolog,epilog}.sh and hase-mps-plugstack.conf into.")
@click.option("--on-failure", type=click.Choice(FAILURE_POLICIES), default="drain", show_default=True,
              help="drain: exit 1 so Slurm drains the node; ignore: exit 0, job runs without MPS.")
@click.option("--pipe-dir", default=MpsConfig.pipe_dir, show_default=True,
              help="Base of per-job CUDA_MPS_PIPE_DIRECTORY (match the SPANK pipe_dir=).")
@click.option("--log-dir", default=MpsConfig.log_dir, show_default=True,
              help="Base of per-job CUDA_MPS_LOG_DIRECTORY (match the SPANK log_dir=).")
@click.option("--mps-control", default=MpsConfig.mps_control, show_default=True,
              help="nvidia-cuda-mps-control binary (name on PATH or absolute path).")
@click.option("--log-file", default="", help="Also append log lines to this file.")
@click.option("--no-syslog", is_flag=True, help="Do not send log lines to syslog (logger).")
@click.option("--start-timeout", "start_timeout_s", type=int, default=MpsConfig.start_timeout_s,
              show_default=True,
              help="Seconds to wait for the daemon's control pipe (prolog), and for the daemon "
                   "to exit after quit before it is killed (both).")
@click.option("--keep-logs/--drop-logs", default=MpsConfig.keep_logs, show_default=True,
              help="Whether the epilog keeps the job's MPS log directory.")
@click.option("--plugin", default=MpsConfig.plugin, show_default=True,
              help="Path of hase_mps.so on the nodes, for the plugstack.conf line.")
@click.option("--sweep-every", "sweep_every_min", type=click.IntRange(1, MAX_EVERY_MIN),
              default=15, show_default=True,
              help="Minutes between runs of the hase-mps-sweep.timer written beside the scripts.")
@click.option("--hase", "hase_path", default=None,
              help="Absolute path of `hase` on the nodes, for the sweep service (default: the "
                   "one running now).")
def render_cmd(out_dir: Path, on_failure: str, pipe_dir: str, log_dir: str, mps_control: str,
               log_file: str, no_syslog: bool, start_timeout_s: int, keep_logs: bool,
               plugin: str, sweep_every_min: int, hase_path: str | None) -> None:
    """Render the MPS prolog/epilog scripts for slurm.conf Prolog=/Epilog=, the matching
    plugstack.conf line (printed, and written as hase-mps-plugstack.conf), and a systemd
    service + timer that run `hase gpu mps sweep` (SLURM_CONF as set now, if set).

    \b
    Examples:
      hase gpu mps render --out /etc/slurm/hase
      hase gpu mps render --out /etc/slurm/hase --on-failure ignore --log-file /var/log/hase-mps.log
      (docs/mps.md: slurm.conf lines, the SPANK plugin, what a failure does)
    """
    try:
        config = MpsConfig(pipe_dir=pipe_dir, log_dir=log_dir, on_failure=on_failure,
                           mps_control=mps_control, log_file=log_file, syslog=not no_syslog,
                           start_timeout_s=start_timeout_s, keep_logs=keep_logs, plugin=plugin)
    except MpsConfigError as exc:
        raise ConfigError(exc.worded(RENDER_OPTIONS)) from None
    units = render_units(out_dir, every_min=sweep_every_min, hase=hase_path,
                         slurm_conf=os.environ.get("SLURM_CONF") or None)
    written = {**write_scripts(config, out_dir), **write_units(out_dir, units)}
    for kind, path in written.items():
        click.echo(f"{kind}: {path}")
    click.echo(f"sweep timer: systemctl link {written['sweep-service']} {written['sweep-timer']}"
               " && systemctl enable --now hase-mps-sweep.timer")
    click.echo(f"plugstack.conf line (same directories as the scripts): {plugstack_line(config)}")


@mps.command(name="sweep")
@click.option("--scripts", "scripts_dir", required=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="The directory `hase gpu mps render --out` wrote (its epilog and pipe_dir).")
@click.option("--node", default=None,
              help="This node's Slurm NodeName (default: this host's short name).")
@click.option("--min-age", "min_age_s", type=click.FloatRange(min=0), default=600.0,
              show_default=True,
              help="Keep pipe directories younger than this many seconds (a prolog may be "
                   "starting them).")
@click.option("--dry-run", is_flag=True, help="Say what would be stopped; stop nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of lines.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=60.0,
              show_default=True, help="Seconds to wait for squeue.")
def sweep_cmd(scripts_dir: Path, node: str | None, min_age_s: float, dry_run: bool,
              as_json: bool, timeout_s: float) -> None:
    """Stop MPS daemons of jobs that no longer run on this node (run as root on the node).

    The epilog stops a job's daemon when the job ends; if it never ran or did not finish
    (slurmd restarted, an epilog timeout), the daemon keeps its GPU. This lists the job ids
    under the scripts' pipe_dir (directories, and processes started with one), asks squeue
    which of them still run here, and runs the rendered epilog for each of the others. If
    squeue fails, nothing is stopped. Exit 1 when a daemon could not be stopped.

    \b
    Examples:
      hase gpu mps sweep --scripts /etc/slurm/hase --dry-run
      hase gpu mps sweep --scripts /etc/slurm/hase --node gpu-a100-01 --json
      (docs/mps.md: run it from a systemd timer, or after slurmd crashed)
    """
    from slurm_hase.cli.slurm_env import check_slurm_conf
    from slurm_hase.mps.sweep import read_setup, sweep
    from slurm_hase.slurm.command_backend import CommandBackend
    from slurm_hase.slurm.runner import SubprocessRunner

    setup = read_setup(scripts_dir)
    check_slurm_conf(os.environ)
    name = node or socket.gethostname().split(".")[0]
    runner = SubprocessRunner()
    try:
        report = sweep(setup, name, CommandBackend(runner, timeout_s=timeout_s), runner,
                       min_age_s=min_age_s, dry_run=dry_run)
    except SlurmError as exc:
        raise SlurmError(f"cannot ask Slurm which jobs run on {name}: {exc}; nothing was "
                         "stopped") from exc
    if as_json:
        click.echo(json.dumps(report.as_dict(), indent=2))
    elif not report.outcomes:
        click.echo(f"{name}: nothing under {report.pipe_base}")
    for o in [] if as_json else report.outcomes:
        where = o.directory or "no directory"
        pids = f", processes {' '.join(map(str, o.pids))}" if o.pids else ""
        click.echo(f"job {o.job_id}: {o.action} ({o.reason}; {where}{pids})")
    if report.failed:
        raise click.exceptions.Exit(1)


gpu.add_command(mps)
