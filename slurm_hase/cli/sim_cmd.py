"""`hase simulate`: replay a real trace through a policy on a simulated Slurm (thin click layer)."""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path
from typing import Any

import click

from slurm_hase.errors import ConfigError


class _Finite(click.FloatRange):
    """A FloatRange that also refuses nan and inf (which every range check lets through)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


def _gpus(text: str) -> dict[str, int]:
    """--gpus TYPE=N,TYPE=N as {type: N}; ConfigError naming the entry that is not TYPE=N."""
    out: dict[str, int] = {}
    for entry in text.split(","):
        name, sep, value = (part.strip() for part in entry.partition("="))
        try:
            if not sep or not name:
                raise ValueError
            count = int(value)
        except ValueError:
            raise ConfigError(f"--gpus {entry!r}: expected TYPE=N (e.g. k80=32,v100=32)") from None
        if name in out:
            raise ConfigError(f"--gpus {entry!r}: GPU type {name!r} given twice")
        out[name] = count
    return out


def _knobs(pairs: tuple[str, ...]) -> dict[str, float]:
    out: dict[str, float] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        try:
            if not sep:
                raise ValueError
            out[key.strip()] = float(value)
        except ValueError:
            raise ConfigError(f"--knob {pair!r}: expected NAME=NUMBER") from None
    return out


@click.command(name="simulate")
@click.option("--trace", required=True,
              help="Trace file, or philly / gavel / alibaba: those traces in --data-dir (gavel "
                   "also comes with the package).")
@click.option("--trace-kind", type=click.Choice(["auto", "philly", "gavel", "alibaba"]), default="auto")
@click.option("--cluster", "cluster_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Cluster spec TOML ([[nodes]] ...).")
@click.option("--gpus", "gpus", default="k80=32,p100=32,v100=32", show_default=True,
              help="Without --cluster: GPUs per type, 4 per node.")
@click.option("--policy", default="fifo", show_default=True, help="fifo, hase, fair, gavel.")
@click.option("--knob", "knob", multiple=True, help="Policy knob NAME=VALUE (e.g. theta=0.2).")
@click.option("--predictor", type=click.Choice(["oracle", "model"]), default="oracle", show_default=True)
@click.option("--interval", type=_Finite(1.0, 86400.0), default=60.0, show_default=True,
              help="Daemon cycle in simulated s (its interval_s, 1 to 86400).")
@click.option("--refresh", type=click.FloatRange(0.0), default=None,
              help="The daemon's refresh_s: a cycle that finds no job or node changed decides "
              "nothing until this long after the last one that did (0 = every cycle decides; "
              "default: 600, as the daemon).")
@click.option("--start", type=click.IntRange(min=0), default=0, show_default=True,
              help="First trace job to use (0 = the first).")
@click.option("--jobs", "count", type=click.IntRange(min=1), default=None,
              help="Number of trace jobs to use (default: all from --start).")
@click.option("--tile", "tile_to", type=click.IntRange(min=0), default=None,
              help="Repeat the trace up to N jobs (0 = no tiling).")
@click.option("--load", type=_Finite(0.0, min_open=True), default=None,
              help="Rescale arrivals to this offered load (> 0; default: the trace's own).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              envvar="HASE_DATA_DIR", show_envvar=True,
              help="The public data sets (sia/, gavel/, alibaba/; the project's shared/data) "
                   "for the trace aliases and Gavel's throughputs (default: ../shared/data "
                   "beside a checkout; the bundled Gavel files when absent).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("sim-out"),
              show_default=True)
@click.option("--checkpoint-share", type=click.FloatRange(0.0, 1.0), default=0.0, show_default=True,
              help="Share of jobs that opt in to checkpoint + requeue (turns requeue on).")
@click.option("--requeue-overhead", type=click.FloatRange(0.0), default=120.0, show_default=True,
              help="Seconds of work a checkpoint restart costs a requeued job.")
@click.option("--hsbatch-slack", type=click.FloatRange(0.0), default=0.0, show_default=True,
              help="Jobs are submitted with hsbatch at this HASE_SPEED_SLACK (0 = plain sbatch).")
@click.option("--ledger-half-life", type=click.FloatRange(min=1.0, max=1e9), default=7 * 86400.0,
              show_default=True, help="The daemon's usage half-life in s (its half_life_s): "
              "how long past GPU service counts against an account.")
@click.option("--plots/--no-plots", default=True, show_default=True)
@click.option("--format", "fmt", type=click.Choice(["png", "svg"]), default="png", show_default=True)
@click.option("--json", "as_json", is_flag=True,
              help="Print the run's summary (settings + metrics, as OUT/POLICY.json) on stdout "
                   "instead of the file list and the one-line summary.")
def simulate(trace: str, trace_kind: str, cluster_path: Path | None, gpus: str, policy: str,
             knob: tuple[str, ...], predictor: str, interval: float, refresh: float | None,
             start: int,
             count: int | None, tile_to: int | None, load: float | None, seed: int,
             data_dir: Path | None, out: Path, checkpoint_share: float, requeue_overhead: float,
             hsbatch_slack: float, ledger_half_life: float, plots: bool, fmt: str,
             as_json: bool) -> None:
    """Replay a real trace through POLICY on a simulated Slurm and write metrics and plots.

    \b
    Examples:
      hase simulate --trace philly --jobs 1000 --start 20000 --load 1.2 --policy fair --knob theta=0.2
      hase simulate --trace my_trace.trace --cluster my_cluster.toml --policy hase --predictor model
      hase simulate --trace gavel --policy fifo --out fifo-run   # the Slurm baseline, to compare
      hase simulate --trace my_trace.trace --policy fair --no-plots --json | jq .metrics.avg_jct_s
      (docs/simulator.md: trace and cluster formats, what the metrics mean)
    """
    from slurm_hase.policy.registry import make_policy
    from slurm_hase.sim.cluster import load_cluster, uniform_cluster
    from slurm_hase.sim.engine import SimConfig
    from slurm_hase.sim.report import (
        DEFAULT_DATA,
        TraceSetup,
        check_runnable,
        check_speeds,
        describe_refusals,
        prepare_trace,
        refused_count,
        resolve_trace,
        throughput_table,
        write_outputs,
    )

    knobs = _knobs(knob)
    make_policy(policy, **knobs)  # an unknown policy or knob fails here, before any work
    data = data_dir or DEFAULT_DATA
    spec = load_cluster(cluster_path) if cluster_path is not None else uniform_cluster(
        _gpus(gpus), where="--gpus")
    table = throughput_table(data)
    check_speeds(spec, table)
    setup = TraceSetup(resolve_trace(trace, data), trace_kind, start, count, tile_to, load, seed)
    jobs = prepare_trace(setup, table, spec)
    refused = check_runnable(jobs, spec, table)
    if refused:
        click.echo(f"hase: warning: {sum(refused.values())} of {len(jobs)} jobs can never run on "
                   f"this cluster and are refused at submission (as sbatch would): "
                   f"{describe_refusals(refused)}", err=True)
    config = SimConfig(policy=policy, knobs=knobs, interval_s=interval, predictor=predictor,
                       refresh_s=SimConfig.refresh_s if refresh is None else refresh,
                       checkpoint_share=checkpoint_share, requeue_overhead_s=requeue_overhead,
                       hsbatch_slack=hsbatch_slack, ledger_half_life_s=ledger_half_life)
    click.echo(f"simulating {len(jobs)} jobs on {spec.total_gpus} GPUs {spec.gpus_by_type} "
               f"with {policy}", err=True)
    with click.progressbar(length=len(jobs), label="jobs finished", file=sys.stderr) as bar:
        from slurm_hase.sim.engine import simulate as run_sim
        from slurm_hase.sim.metrics import compute

        result = run_sim(jobs, spec, table, config, progress=bar.update)
        metrics = {**compute(result), "refused": refused_count(result)}
    meta = {"trace": str(setup.path), **{k: v for k, v in dataclasses.asdict(setup).items() if k != "path"},
            "policy": policy, "knobs": config.knobs, "predictor": predictor, "interval_s": interval,
            "refresh_s": config.refresh_s,
            "gpus_by_type": spec.gpus_by_type, "ledger_half_life_s": ledger_half_life,
            "checkpoint_share": checkpoint_share, "hsbatch_slack": hsbatch_slack}
    paths = write_outputs(out, policy, result, metrics, meta)
    if plots:
        from slurm_hase.sim.plots import plot_runs

        paths += plot_runs({policy: result}, out, fmt)
    if as_json:
        click.echo(paths[0].read_text(), nl=False)  # the summary file, exactly
        return
    for path in paths:
        click.echo(str(path))
    click.echo(f"avg JCT {metrics.get('avg_jct_s', 0) / 3600:.2f} h, p99 JCT "
               f"{metrics.get('p99_jct_s', 0) / 3600:.2f} h, p99 rho {metrics.get('rho_p99', 0):.2f}, "
               f"Jain {metrics.get('jain_accounts', 0):.3f} (per day "
               f"{metrics.get('jain_accounts_1d', 0):.3f}), wall {result.wall_s:.1f} s")
