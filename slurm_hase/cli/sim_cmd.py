"""`hase simulate`: replay a real trace through a policy on a simulated Slurm (thin click layer)."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from slurm_hase.cli.sim_options import (
    Finite,
    model_option,
    parse_gpus,
    parse_knobs,
    route_knobs,
)
from slurm_hase.errors import ConfigError

if TYPE_CHECKING:  # the simulator loads only when a run starts (`hase --help` stays light)
    from slurm_hase.predict.api import Predictor
    from slurm_hase.sim.batch import RunDone, RunTask
    from slurm_hase.sim.cluster import ClusterSpec
    from slurm_hase.sim.engine import SimResult
    from slurm_hase.sim.throughput import ThroughputTable


MAX_TILE = 10_000_000  # --tile: a trace of more jobs would take hours and tens of GB to simulate


def _warn(text: str, kind: str = "warning") -> None:
    click.echo(f"hase: {kind}: {text}", err=True)


def _jain(every: float | None, per_day: float | None) -> str:
    """Both Jain figures; None: no job waited while two or more accounts had jobs (nothing to
    judge between accounts; also every run of a one-account trace, however long its queue)."""
    if every is None:
        return "Jain n/a (never contended between accounts)"
    return f"Jain {every:.3f} (per day {'n/a' if per_day is None else f'{per_day:.3f}'})"


@click.command(name="simulate")
@click.option("--trace", required=True,
              help="Trace file, or philly / gavel / alibaba: those traces in --data-dir (gavel "
                   "also comes with the package). A site's own trace: a CSV with a header line "
                   "and columns timestamp (ISO 8601 date and time, e.g. 2017-10-01 00:00:00, "
                   "UTC unless it has an offset; or seconds, e.g. epoch seconds), duration "
                   "(s, runtime on a V100), num_gpus and cluster (the account); "
                   "docs/simulator.md.")
@click.option("--trace-kind", type=click.Choice(["auto", "philly", "gavel", "alibaba"]),
              default="auto", show_default=True,
              help="The trace's format: philly (a CSV, the form of a site's own trace), gavel "
                   "(Gavel's tab-separated .trace), alibaba (Alibaba 2023 pod list CSV). auto: "
                   "gavel for a file name ending .trace, alibaba for one containing pod_list "
                   "or alibaba, else philly.")
@click.option("--cluster", "cluster_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Cluster spec TOML ([[nodes]] ...).")
@click.option("--gpus", "gpus", default="k80=32,p100=32,v100=32", show_default=True,
              help="Without --cluster (refused with it): GPUs per type, 4 per node.")
@click.option("--policy", "policies", multiple=True, default=["fifo"], show_default=True,
              help="fifo, hase, fair, gavel; repeat it to compare policies on the same jobs "
                   "(one table, ratios to the first, overlaid plots, and by account: which "
                   "accounts gain and which pay).")
@click.option("--knob", "knob", multiple=True,
              help="Policy knob NAME=VALUE (e.g. theta=0.2): set on every listed policy that "
                   "has it; POLICY.NAME=VALUE for one policy (wins over NAME). Each once.")
@click.option("--predictor", type=click.Choice(["oracle", "model"]), default="oracle",
              show_default=True,
              help="The runtimes the policies are given: oracle = the trace's true ones per GPU "
                   "type; model = the daemon's estimator predicting them with the shipped model "
                   "from each job's workload description.")
@click.option("--predicted-speeds", is_flag=True,
              help="Simulate GPU types Gavel's measured table lacks (a100, t4, ...): each job "
                   "type runs at its measured v100 speed times the type's speed-up over the "
                   "v100 that --model predicts (v100 iteration time / the type's). Measured "
                   "types keep their measured speeds. An estimate, not a measurement "
                   "(docs/simulator.md).")
@click.option("--model", "model_file", default="shipped", show_default=True, metavar="FILE",
              help="The predictor's model file for --predicted-speeds and --predictor model "
                   "(shipped = the packaged one; a site's retrained model knows its own GPUs "
                   "best).")
@click.option("--interval", type=Finite(1.0, 86400.0), default=60.0, show_default=True,
              help="Daemon cycle in simulated s (its interval_s, 1 to 86400).")
@click.option("--refresh", type=Finite(0.0), default=None,
              help="The daemon's refresh_s: a cycle that finds no job or node changed decides "
              "nothing until this long after the last one that did (0 = every cycle decides; "
              "default: 600, as the daemon).")
@click.option("--start", type=click.IntRange(min=0), default=0, show_default=True,
              help="First trace job to use (0 = the first).")
@click.option("--jobs", "count", type=click.IntRange(min=1), default=None,
              help="Number of trace jobs to use (default: all from --start).")
@click.option("--tile", "tile_to", type=click.IntRange(0, MAX_TILE), default=None,
              help=f"Repeat the trace up to N jobs (0 = no tiling; at most {MAX_TILE:,}).")
@click.option("--load", type=Finite(0.0, min_open=True), default=None,
              help="Rescale arrivals to this offered load (> 0; default: the trace's own): work "
                   "asked in v100-seconds per second over the cluster's GPUs in v100 "
                   "equivalents, 1 = exactly busy (docs/simulator.md).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Draws what the trace leaves open: each job's workload (Philly, Alibaba and "
                   "CSV traces) or account (Gavel traces, which have none). Arrival times are "
                   "the trace's whatever the seed.")
@click.option("--repeat", type=click.IntRange(1, 1000), default=1, show_default=True,
              help="Run every policy on N draws, seeds SEED..SEED+N-1, each into OUT/seed-K; "
                   "then a table of each metric's mean +- standard error over the seeds (and "
                   "OUT/seeds.json), to tell a real difference from one draw's luck.")
@click.option("--workers", type=click.IntRange(1, 256), default=1, show_default=True,
              help="Run the policies (and --repeat's seeds) in N processes at once: the same "
                   "results in about 1/N of the time on N free cores, with N runs' memory. "
                   "A line per finished run instead of progress bars.")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              envvar="HASE_DATA_DIR", show_envvar=True,
              help="The public data sets (sia/, gavel/, alibaba/; the project's shared/data) "
                   "for the trace aliases and Gavel's throughputs (default: ../shared/data "
                   "beside a checkout; the bundled Gavel files when absent).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("sim-out"),
              show_default=True,
              help="Folder for the results (created if needed): POLICY.json, POLICY_jobs.csv, "
                   "POLICY_timeline.csv, the plots, and run.json listing this run's files. Other "
                   "files are left; results of an earlier run still there are named in a "
                   "warning.")
@click.option("--checkpoint-share", type=Finite(0.0, 1.0), default=0.0, show_default=True,
              help="Share of jobs that opt in to checkpoint + requeue (turns requeue on).")
@click.option("--share-optin", type=Finite(0.0, 1.0), default=0.0, show_default=True,
              help="Share of 1-GPU jobs that opt in to MPS pairing (share=yes); fair pairs "
                   "them with --knob share_gain=1.5 (docs/mps.md, \"Pairing waiting jobs\").")
@click.option("--requeue-overhead", type=Finite(0.0), default=120.0, show_default=True,
              help="Seconds of progress a requeued job loses (on the GPU type it "
                   "was stopped on): steps since its checkpoint, saving and loading it.")
@click.option("--hsbatch-slack", type=Finite(0.0), default=0.0, show_default=True,
              help="Jobs are submitted with hsbatch at this HASE_SPEED_SLACK (0 = plain sbatch).")
@click.option("--ledger-half-life", type=Finite(min=1.0, max=1e9), default=7 * 86400.0,
              show_default=True, help="The daemon's usage half-life in s (its half_life_s): "
              "how long past GPU service counts against an account.")
@click.option("--plots/--no-plots", default=True, show_default=True,
              help="Write OUT/jct_cdf, queue_length, utilisation (by GPU type) and fairness "
                   "(Jain over time, each policy's largest accounts' levels); needs matplotlib.")
@click.option("--format", "fmt", type=click.Choice(["png", "svg"]), default="png",
              show_default=True, help="Image format of the plots.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the run's summary (settings + metrics, as OUT/POLICY.json) on stdout "
                   "instead of the file list and the one-line summary.")
def simulate(trace: str, trace_kind: str, cluster_path: Path | None, gpus: str,
             policies: tuple[str, ...], knob: tuple[str, ...], predictor: str,
             predicted_speeds: bool, model_file: str, interval: float, refresh: float | None,
             start: int,
             count: int | None, tile_to: int | None, load: float | None, seed: int, repeat: int,
             workers: int, data_dir: Path | None, out: Path, checkpoint_share: float,
             share_optin: float, requeue_overhead: float, hsbatch_slack: float, ledger_half_life: float,
             plots: bool, fmt: str, as_json: bool) -> None:
    """Replay a real trace through POLICY on a simulated Slurm and write metrics and plots.

    \b
    Examples:
      hase simulate --trace philly --jobs 1000 --start 20000 --load 1.2 --policy fair --knob theta=0.2
      hase simulate --trace gavel --policy fifo --policy hase --policy fair --knob fair.theta=0.5
      hase simulate --trace my_trace.trace --cluster my_cluster.toml --policy hase --predictor model
      hase simulate --trace gavel --policy fifo --out fifo-run   # the Slurm baseline, to compare
      hase simulate --trace gavel --gpus a100=8,v100=8,t4=8 --predicted-speeds --policy fair
      hase simulate --trace my_trace.trace --policy fair --no-plots --json | jq .metrics.avg_jct_s
      hase simulate --trace philly --jobs 1000 --start 20000 --load 1.2 --policy fifo --policy fair --repeat 8 --workers 2
      (docs/simulator.md: trace and cluster formats, what the metrics mean)
    """
    from slurm_hase.policy.registry import make_policy
    from slurm_hase.sim.batch import RunTask, run_parallel
    from slurm_hase.sim.cluster import describe_spec, load_cluster, uniform_cluster
    from slurm_hase.sim.engine import SimConfig
    from slurm_hase.sim.predicted import predicted_meta
    from slurm_hase.sim.report import (
        DEFAULT_DATA,
        TraceSetup,
        check_runnable,
        check_speeds,
        describe_refusals,
        prepare_out,
        prepare_trace,
        record_run,
        resolve_trace,
        throughput_path,
        throughput_table,
    )
    from slurm_hase.sim.traces import detect_kind

    per_policy = route_knobs(policies, parse_knobs(knob))
    for name in policies:  # an unknown policy or knob fails here, before any work
        make_policy(name, **per_policy[name])
    if plots:  # a missing optional extra fails now, not after the runs
        from slurm_hase.sim.plots import check_matplotlib

        check_matplotlib()
    data = data_dir or DEFAULT_DATA
    if cluster_path is not None and (click.get_current_context().get_parameter_source("gpus")
                                     is not click.core.ParameterSource.DEFAULT):
        raise ConfigError("--gpus with --cluster: the cluster file names every GPU, so --gpus "
                          "would be ignored; give one of the two")
    table = throughput_table(data)
    # with --predicted-speeds any catalog type may be named (close matches among all of them)
    runnable = None if predicted_speeds else table.gpu_types
    spec = load_cluster(cluster_path, runnable) if cluster_path is not None else (
        uniform_cluster(parse_gpus(gpus), where="--gpus", runnable=runnable))
    path = resolve_trace(trace, data)
    model, loaded = model_option(model_file, predicted_speeds or predictor == "model")
    if predicted_speeds and loaded is not None:
        table = _predict_speeds(table, spec, model, loaded)
    check_speeds(spec, table)
    refresh_s = SimConfig.refresh_s if refresh is None else refresh
    configs = {name: SimConfig(policy=name, knobs=per_policy[name], interval_s=interval,
                               predictor=predictor, model=model, refresh_s=refresh_s,
                               checkpoint_share=checkpoint_share, share_optin=share_optin,
                               requeue_overhead_s=requeue_overhead, hsbatch_slack=hsbatch_slack,
                               ledger_half_life_s=ledger_half_life) for name in policies}
    settings = {"predictor": predictor, "interval_s": interval,
                "gpus_by_type": spec.gpus_by_type, "ledger_half_life_s": ledger_half_life,
                "checkpoint_share": checkpoint_share, "share_optin": share_optin,
                "hsbatch_slack": hsbatch_slack,
                "requeue_overhead_s": requeue_overhead,
                "trace_kind": detect_kind(path) if trace_kind == "auto" else trace_kind,
                "cluster": None if cluster_path is None else str(cluster_path),
                "cluster_spec": describe_spec(spec), "throughputs": str(throughput_path(data)),
                "model": model or "shipped", "predicted_speeds": predicted_meta(table, model)}
    run_settings: dict[str, Any] = {}

    def tasks() -> Iterator[RunTask]:
        """Each seed's runs, the seed's jobs drawn only when its first run is taken."""
        for draw in range(seed, seed + repeat):
            setup = TraceSetup(path, trace_kind, start, count, tile_to, load, draw)
            first = draw == seed
            jobs = prepare_trace(setup, table, spec, warn=_warn if first else None,
                                 note=(lambda text: _warn(text, "note")) if first else None)
            refused = check_runnable(jobs, spec, table)
            if refused:
                _warn(f"{sum(len(r) for r in refused.values())} of {len(jobs)} jobs "
                      f"{'' if repeat == 1 else f'(seed {draw}) '}can never run on this cluster "
                      f"and are refused at submission (as sbatch would): "
                      f"{describe_refusals(refused, examples=3)} in {path.name}")
            meta = {"trace": str(setup.path),
                    **{k: v for k, v in dataclasses.asdict(setup).items() if k != "path"},
                    **settings}
            if first:  # a folder that cannot be written fails now, not after the runs
                try:
                    prepare_out(out)
                except ConfigError as exc:
                    raise ConfigError(f"--out {exc}") from None
                run_settings.update({**meta, "policies": list(policies), "knobs": per_policy,
                                     "refresh_s": refresh_s, "repeat": repeat})
            where = out if repeat == 1 else out / f"seed-{draw}"
            for name, config in configs.items():
                yield RunTask((draw, name), jobs, spec, table, config, where,
                              {**meta, "policy": name, "knobs": config.knobs,
                               "refresh_s": config.refresh_s}, keep_result=plots)

    finished = (run_parallel(tasks(), workers) if workers > 1
                else map(_run_with_progress, tasks()))
    runs, summaries, written = _collect(finished, policies, repeat, fmt if plots else None,
                                        workers > 1)
    if repeat > 1:
        written.append(_print_seeds(policies, runs, out, as_json, run_settings))
    else:
        _print(policies, runs[seed], summaries, written, as_json, run_settings)
    if stale := record_run(out, written, run_settings):
        _warn(stale)


def _predict_speeds(table: ThroughputTable, spec: ClusterSpec, model: str | None,
                    predictor: Predictor) -> ThroughputTable:
    """`table` with predicted speeds for the cluster's unmeasured types (by `predictor`, read
    from `model`, None: the shipped one), said in a warning."""
    from slurm_hase.sim.predicted import predicted_note, predicted_table

    out = predicted_table(table, list(spec.gpus_by_type), predictor)
    trained = predictor.meta.get("gpus")
    _warn(predicted_note(out, model, trained if isinstance(trained, list) else None),
          "warning" if out.predicted else "note")
    return out


def _collect(finished: Iterable[RunDone], policies: Sequence[str], repeat: int,
             plot_format: str | None, say_each: bool
             ) -> tuple[dict[int, dict[str, dict[str, Any]]], dict[str, Path], list[Path]]:
    """Gather the runs as they finish; once a seed's policies have all run, its overlaid plots
    (unless `plot_format` is None). Returns (seed -> policy -> metrics, policy -> summary file
    of the first seed, the files written: by seed, policy, then plots, as one process writes
    them). `say_each`: a line on stderr per finished run."""
    results: dict[int, dict[str, SimResult | None]] = {}
    runs: dict[int, dict[str, dict[str, Any]]] = {}
    files: dict[int, dict[str, list[Path]]] = {}
    plotted: dict[int, list[Path]] = {}
    for done in finished:
        draw, name = done.key
        if say_each:
            seed_part = f" (seed {draw})" if repeat > 1 else ""
            click.echo(f"{name}{seed_part}: {done.jobs} jobs simulated in "
                       f"{done.metrics.get('wall_s', 0.0):.1f} s", err=True)
        results.setdefault(draw, {})[name] = done.result
        runs.setdefault(draw, {})[name] = done.metrics
        files.setdefault(draw, {})[name] = done.written
        if len(results[draw]) == len(policies):
            mine = results.pop(draw)  # the seed's results are dropped once plotted
            plotted[draw] = []
            if plot_format is not None:
                from slurm_hase.sim.plots import plot_runs

                plotted[draw] = plot_runs(_kept(mine, policies), done.out, plot_format)
    written = [path for draw in sorted(files)
               for path in [*(f for p in policies for f in files[draw][p]), *plotted[draw]]]
    first = min(files)
    return runs, {p: files[first][p][0] for p in policies}, written


def _kept(results: Mapping[str, SimResult | None], policies: Sequence[str]
          ) -> dict[str, SimResult]:
    """The runs' results in `policies` order; each task of a plotted run keeps its result."""
    kept = {p: results[p] for p in policies}
    missing = [p for p, r in kept.items() if r is None]
    if missing:
        raise RuntimeError(f"runs of {', '.join(missing)} came back without their results")
    return {p: r for p, r in kept.items() if r is not None}


def _print_seeds(policies: tuple[str, ...], runs: dict[int, dict[str, dict[str, Any]]],
                 out: Path, as_json: bool, settings: dict[str, Any]) -> Path:
    """Write OUT/seeds.json (over_seeds, with the run's settings) and print it, or the seed
    folders and its table; the file's path."""
    from slurm_hase.sim.compare import over_seeds, seeds_table

    summary = over_seeds(policies, runs)
    text = json.dumps({**summary, "settings": settings}, indent=2, sort_keys=True) + "\n"
    target = out / "seeds.json"
    target.write_text(text)
    if as_json:
        click.echo(text, nl=False)
        return target
    for draw in sorted(runs):
        click.echo(str(out / f"seed-{draw}"))
    click.echo(str(target))
    click.echo(seeds_table(summary))
    return target


def _run_with_progress(task: RunTask) -> RunDone:
    """One run in this process, with a progress bar on a terminal, else a line every ~10 s."""
    from slurm_hase.sim.batch import run_task
    from slurm_hase.sim.metrics import capacity
    from slurm_hase.sim.report import ProgressLines

    whole = capacity(task.spec.gpus_by_type)
    parts = "" if whole == task.spec.total_gpus else f" ({whole:g} GPUs, MIG instances as parts)"
    click.echo(f"simulating {len(task.jobs)} jobs on {task.spec.total_gpus} GPUs{parts} "
               f"{task.spec.gpus_by_type} with {task.config.policy}", err=True)
    if getattr(sys.stderr, "isatty", lambda: False)():
        with click.progressbar(length=len(task.jobs), label=f"{task.config.policy}: jobs "
                               "finished", file=sys.stderr) as bar:
            return run_task(task, progress=bar.update)
    # click's bar prints only its label where stderr is no terminal (a log, CI)
    lines = ProgressLines(task.config.policy, len(task.jobs),
                          lambda text: click.echo(text, err=True))
    done = run_task(task, progress=lines.update)
    lines.finish()
    return done


def _print(policies: tuple[str, ...], metrics: dict[str, dict[str, Any]],
           summaries: dict[str, Path], paths: list[Path], as_json: bool,
           settings: dict[str, Any]) -> None:
    """The run's summary file (one policy) or the comparison with the run's settings as JSON;
    else the files written, a line per policy and, for several, the comparison table."""
    from slurm_hase.sim.compare import account_table, comparison, comparison_table

    if as_json:
        if len(policies) == 1:
            click.echo(summaries[policies[0]].read_text(), nl=False)  # the summary file, exactly
        else:
            click.echo(json.dumps({**comparison(policies, metrics), "settings": settings},
                                  indent=2, sort_keys=True))
        return
    for path in paths:
        click.echo(str(path))
    for name in policies:
        m = metrics[name]
        click.echo(f"{name + ': ' if len(policies) > 1 else ''}"
                   f"avg JCT {m.get('avg_jct_s', 0) / 3600:.2f} h, p99 JCT "
                   f"{m.get('p99_jct_s', 0) / 3600:.2f} h, p99 rho {m.get('rho_p99', 0):.2f}, "
                   f"{_jain(m.get('jain_accounts'), m.get('jain_accounts_1d'))}, "
                   f"wall {m.get('wall_s', 0):.1f} s")
    if len(policies) > 1:
        click.echo(comparison_table(policies, metrics))
    click.echo(account_table(policies, metrics))
