"""`hase model`: train, evaluate, query and refit the performance predictor (thin layer)."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from slurm_hase.cli.clickio import OutputFile, QuietPipeGroup, check_distinct
from slurm_hase.cli.model_save import check_registry, store_model

if TYPE_CHECKING:
    from slurm_hase.predict.api import Prediction
    from slurm_hase.predict.descriptor import WorkloadDescriptor


@click.group(name="model", cls=QuietPipeGroup)
def model() -> None:
    """Train, evaluate and query the performance predictor."""


@model.command("train")
@click.option("--data", "data", multiple=True, required=True, type=click.Path(dir_okay=False),
              help="Canonical measurement CSV (repeatable; 'shipped' = the packaged training data).")
@click.option("--out", required=True, type=OutputFile(), help="Model file to write.")
@click.option("--registry", type=OutputFile(), default=None,
              help="SQLite file to record the model as a new version.")
@click.option("--note", default="", help="Free text stored with the model.")
def train_cmd(data: tuple[str, ...], out: str, registry: str | None, note: str) -> None:
    """Train P50/P90 models on measurement CSVs (the canonical columns: docs/predictor.md).

    \b
    Examples:
      hase model train --data shipped --data site.csv \\
                       --out site-model.json --registry models.sqlite --note 'with our A40s'
      hsbatch --hase-predictor=site-model.json job.sh   # or HASE_PREDICTOR=site-model.json
    """
    from slurm_hase.predict.dataset import data_path, read_many
    from slurm_hase.predict.train import train

    check_distinct([("--out", out), ("--registry", registry)], [("--data", data_path(d)) for d in data])
    check_registry(registry)
    rows = read_many(data)
    pred = train(rows, note=note)
    pairs = ""
    if pred.pairs is not None:
        betas = ", ".join(f"{g} {b:.2f}" for g, b in pred.pairs.beta.items())
        pairs = f"; pair memory: {len(pred.pairs.residuals)} measured MPS pairings (beta {betas})"
    store_model(pred, out, registry, note,
           f"trained on {len(rows)} rows ({', '.join(pred.meta['gpus'])}) in "
           f"{pred.meta['train_seconds']}s -> {out}{pairs}")


@model.command("evaluate")
@click.option("--data", "data", multiple=True, required=True, type=click.Path(dir_okay=False),
              help="Measurement CSV to cross-validate on (repeatable: the files are joined; "
                   "each fold needs 10 rows to train on; 'shipped' = the packaged training data).")
@click.option("--split", type=click.Choice(["random", "leave-one-gpu-out", "leave-one-model-out",
                                            "leave-one-pair-out"]), default=None,
              help="Cross-validate with this split (retrains per fold).")
@click.option("--model", "model_path", default=None,
              help="Score this model file ('shipped' = the packaged default) without retraining.")
@click.option("--baseline/--no-baseline", default=None,
              help="With --split: also cross-validate the HASE-style baseline (default: on). "
                   "Not with --model: the baseline is trained on the folds, a model file has none.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def evaluate_cmd(data: tuple[str, ...], split: str | None, model_path: str | None,
                 baseline: bool | None, as_json: bool) -> None:
    """MAPE overall and per GPU type / model.

    --split cross-validates (ours and, unless --no-baseline, the HASE-style baseline, both
    retrained per fold); --model scores one trained model as it is (no baseline).

    \b
    Examples:
      hase model evaluate --data site.csv --split leave-one-gpu-out
      hase model evaluate --data site.csv --model shipped      # the packaged model on your data
      hase model evaluate --data site.csv --model site-model.json --json
    """
    from slurm_hase.predict.dataset import read_many
    from slurm_hase.predict.evaluate import cross_validate, predict_rows, score
    from slurm_hase.predict.modelfile import load_predictor

    if (split is None) == (model_path is None):
        raise click.UsageError("give exactly one of --split (cross-validate) or --model (score a model)")
    if model_path is not None and baseline:
        raise click.UsageError("--baseline needs --split: the HASE baseline is trained on the folds, "
                               "while --model scores a finished model as it is")
    rows = read_many(data)
    if model_path is not None:
        pred = load_predictor(model_path)  # "shipped": the packaged model
        scores = {"model": score(rows, predict_rows(pred, rows))}
    else:
        assert split is not None
        # one training per fold (leave-one-pair-out: one per (model, GPU) pair): show progress
        with click.progressbar(length=1, label=f"{split} folds", file=sys.stderr) as bar:
            def on_fold(done: int, total: int) -> None:
                bar.length = total
                bar.update(1)

            scores = cross_validate(rows, split, baseline=baseline is not False, on_fold=on_fold)
    if as_json:
        click.echo(json.dumps({k: v.as_dict() for k, v in scores.items()}, indent=1))
        return
    for name, s in scores.items():
        co = "n/a" if s.mape_colocated is None else f"{s.mape_colocated:.2f}%"
        click.echo(f"{name}: rows={s.n} MAPE={s.mape:.2f}% co-located MAPE={co}")
        for label, table in (("gpu", s.per_gpu), ("model", s.per_model)):
            click.echo("  per " + label + ": " + ", ".join(f"{k}={v:.1f}%" for k, v in table.items()))


# predict's options that describe the workload (parameter -> flag); --spec replaces them all
_WORKLOAD_OPTIONS = {"model_name": "--model", "gflops": "--gflops", "params": "--params",
                     "batch_size": "--batch-size", "precision": "--precision", "mode": "--mode",
                     "gpus": "--gpus", "iterations": "--iterations", "corunners": "--corunner"}


@model.command("predict")
@click.option("--model-file", default=None,
              help="Model file ('shipped' or unset: the packaged default).")
@click.option("--model", "model_name", default=None, help="Workload model name, e.g. resnet50.")
@click.option("--gflops", type=float, default=None, help="GFLOPs per iteration (per GPU).")
@click.option("--params", type=float, default=None, help="Parameters in millions.")
@click.option("--batch-size", type=int, default=None)
@click.option("--precision", default="fp32")
@click.option("--mode", default="train")
@click.option("--gpus", type=int, default=1, help="GPUs the job uses.")
@click.option("--iterations", type=int, default=None, help="Total iterations (gives runtime).")
@click.option("--corunner", "corunners", multiple=True, type=float,
              help="GFLOPs/iter of a job sharing the GPU via MPS (repeatable).")
@click.option("--gpu", "gpu_types", multiple=True, help="GPU types (default: every catalog type).")
@click.option("--spec", default=None,
              help="Whole descriptor instead: 'model=resnet50 bs=64 iters=1000', a JSON object "
                   "as in a descriptor file ('{\"model\": \"resnet50\", \"bs\": 64}') or a job "
                   "comment {\"hase\":1,...}.")
@click.option("--json", "as_json", is_flag=True)
def predict_cmd(model_file: str | None, model_name: str | None, gflops: float | None,
                params: float | None, batch_size: int | None, precision: str, mode: str, gpus: int,
                iterations: int | None, corunners: tuple[float, ...], gpu_types: tuple[str, ...],
                spec: str | None, as_json: bool) -> None:
    """Predicted iteration time (P50/P90) per GPU type for one workload.

    \b
    Examples:
      hase model predict --model resnet50 --batch-size 64 --precision fp16
      hase model predict --model bert-base --batch-size 32 --iterations 20000 --gpu a100 --gpu v100
      hase model predict --gflops 390 --params 25 --batch-size 32 --corunner 120   # MPS-shared
      hase model predict --spec 'model=resnet50 bs=64 iters=1000' --json
    """
    from slurm_hase.predict.catalog import gpu_keys, resolve_gpu
    from slurm_hase.predict.descriptor import WorkloadDescriptor
    from slurm_hase.predict.modelfile import load_predictor

    if spec is not None:
        ctx = click.get_current_context()
        given = [flag for name, flag in _WORKLOAD_OPTIONS.items()
                 if ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)]
        if given:
            raise click.UsageError(f"--spec describes the whole workload; drop {', '.join(given)} "
                                   "(or put them in the spec)")
        parsed = WorkloadDescriptor.from_comment(spec)
        if parsed is None and spec.lstrip().startswith("{"):  # a JSON object, as in a descriptor file
            try:
                obj = json.loads(spec)
            except ValueError as exc:
                raise click.UsageError(f"--spec: not valid JSON ({exc})") from None
            if not isinstance(obj, dict):
                raise click.UsageError("--spec: a JSON spec must be an object of key: value")
            parsed = WorkloadDescriptor.from_pairs(obj.items())
        if parsed is None:
            pairs = [item.partition("=") for item in spec.split()]
            bad = [k for k, eq, _v in pairs if not eq]
            if bad:
                raise click.UsageError(f"--spec: expected key=value, got {bad[0]!r}")
            parsed = WorkloadDescriptor.from_pairs((k, v) for k, _eq, v in pairs)
        desc = parsed
    else:
        raw: dict[str, object] = {"model": model_name, "gflops": gflops, "params": params,
                                  "batch_size": batch_size, "precision": precision, "mode": mode,
                                  "gpus": gpus, "iterations": iterations, "corunners": list(corunners)}
        desc = WorkloadDescriptor.from_mapping({k: v for k, v in raw.items() if v not in (None, [])})
    predictor = load_predictor(model_file)
    # each type once, however it was spelled (k80, K80, "Tesla K80")
    keys = list(dict.fromkeys(resolve_gpu(g).key for g in gpu_types)) if gpu_types else gpu_keys()
    preds = predictor.predict(desc, keys)
    if (why := predictor.extrapolation(desc)) is not None:
        click.echo(f"hase: note: {why}", err=True)
    fits, need_gb = _memory_fit(desc, preds)
    if need_gb is not None and not all(fits.values()):
        click.echo(f"hase: note: the weights need at least {need_gb:.1f} GB per GPU: the types "
                   "marked 'fits no' cannot hold them", err=True)
    ordered = sorted(preds.values(), key=lambda p: p.iter_time_p50)
    if as_json:
        click.echo(json.dumps([{**p.__dict__, "fits_memory": fits[p.gpu_type]} for p in ordered],
                              indent=1))
        return
    click.echo(f"{'gpu':<12}{'iter p50 s':>12}{'iter p90 s':>12}{'run p50':>12}{'run p90':>12}"
               f"{'fits':>6}")
    for p in ordered:
        fit = fits[p.gpu_type]
        click.echo(f"{p.gpu_type:<12}{p.iter_time_p50:>12.4g}{p.iter_time_p90:>12.4g}"
                   f"{_dur(p.runtime_p50_s):>12}{_dur(p.runtime_p90_s):>12}"
                   f"{'?' if fit is None else 'yes' if fit else 'no':>6}")


def _memory_fit(desc: WorkloadDescriptor, preds: dict[str, Prediction]
                ) -> tuple[dict[str, bool | None], float | None]:
    """Per GPU type whether the weights fit its memory (None: parameter count unknown), and the
    memory they need per GPU: hsbatch's own judgement (plan.judge_types, its `fits` column)."""
    from slurm_hase.hsbatch import plan
    from slurm_hase.predict.catalog import resolve_gpu

    params = plan.params_m(desc)
    rows = plan.judge_types({k: (desc.num_gpus, False) for k in preds}, desc,
                            memory_of=lambda k: resolve_gpu(k).memory_gb, params_m=params,
                            time_limit_s=None, predictions=preds)
    return {r.gpu_type: r.fits_memory for r in rows}, plan.min_memory_gb(desc, params)


def _dur(s: float | None) -> str:
    if s is None:
        return "-"
    h, rem = divmod(int(round(s)), 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}"


@model.command("refit")
@click.option("--data", "data", multiple=True, required=True, type=click.Path(dir_okay=False),
              help="Base measurement CSV the new model also trains on (repeatable; 'shipped' = the "
                   "packaged training data).")
@click.option("--out", required=True, type=OutputFile(), help="Model file to write.")
@click.option("--registry", type=OutputFile(), default=None,
              help="SQLite file to record the model as a new version.")
@click.option("--since", default="now-30days",
              help="sacct window start, in your local time or relative (now-30days).")
@click.option("--sacct-json", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Read finished jobs from saved `sacct --json -a -D` output instead of running sacct.")
@click.option("--save-rows", type=OutputFile(), default=None,
              help="Also write the harvested site rows that were kept as canonical CSV.")
@click.option("--model-file", default=None,
              help="The model in use now, for the plausibility check ('shipped' or unset: the "
                   "packaged default).")
@click.option("--max-ratio", type=click.FloatRange(min=1, min_open=True), default=10.0,  # refit.MAX_RATIO
              show_default=True,
              help="Skip a job whose measured iteration time is more than this many times off "
                   "the model in use (either way): a sleep job or a wrong iteration count.")
def refit_cmd(data: tuple[str, ...], out: str, registry: str | None, since: str,
              sacct_json: str | None, save_rows: str | None, model_file: str | None,
              max_ratio: float) -> None:
    """Add finished jobs' real runtimes (sacct + descriptor in the comment) and retrain.

    Fails, leaving every output as it was, when no job gives a usable row.

    \b
    Examples:
      hase model refit --data shipped --since now-30days \\
                       --out site-model.json --registry models.sqlite
      hase model refit --data site.csv --sacct-json saved.json --out site-model.json --save-rows site-jobs.csv
    """
    from slurm_hase.predict.dataset import data_path, read_many
    from slurm_hase.predict.modelfile import load_predictor
    from slurm_hase.predict.refit import harvest, one_row_per_job, refit

    check_distinct([("--out", out), ("--registry", registry), ("--save-rows", save_rows)],
                   [("--data", data_path(d)) for d in data]
                   + ([("--sacct-json", sacct_json)] if sacct_json else []))
    check_registry(registry)
    reference = load_predictor(model_file)
    base = read_many(data)
    records: list[Any]
    if sacct_json:
        from slurm_hase.reports.saved import read_saved_sacct

        records = read_saved_sacct(Path(sacct_json), "--sacct-json")
    else:
        from slurm_hase.cli.slurm_env import check_slurm_conf
        from slurm_hase.reports.window import parse_time, stamp
        from slurm_hase.slurm.command_backend import CommandBackend
        from slurm_hase.slurm.runner import SubprocessRunner

        # read in this process's time zone; sacct gets UTC (the adapter runs it with TZ=UTC)
        start = stamp(parse_time(since, time.time(), "--since"))
        check_slurm_conf(os.environ)
        records = CommandBackend(SubprocessRunner()).accounting(since=start)
    got = harvest(records, reference, max_ratio)
    click.echo(f"harvested {len(got.rows)} jobs from {sacct_json or 'sacct'} "
               f"(skipped {got.skipped_text()})")
    if got.worst is not None:
        click.echo(f"hase: note: dropped {got.implausible} implausible row(s), more than {max_ratio:g}x "
                   f"off the model in use; worst: {got.worst.describe()}", err=True)
    got.require_rows()
    _rows, repeats = one_row_per_job(base, got.rows)
    if repeats:
        click.echo(f"hase: note: {repeats} harvested job row(s) were already in --data or listed "
                   "twice: each job counted once (its newest row)", err=True)
    pred = refit(base, got.rows)
    store_model(pred, out, registry, "refit", f"refit model -> {out}",
           rows=(got.rows, save_rows) if save_rows else None)


@model.command("versions")
@click.option("--registry", required=True, type=click.Path(dir_okay=False, exists=True))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def versions_cmd(registry: str, as_json: bool) -> None:
    """List stored model versions.

    \b
    Examples:
      hase model versions --registry models.sqlite
      hase model versions --registry models.sqlite --json
    """
    from slurm_hase.predict.registry import ModelRegistry

    versions = ModelRegistry.read_versions(registry)  # read-only: listing never writes
    if as_json:
        click.echo(json.dumps([dataclasses.asdict(v) for v in versions], indent=2))
        return
    if not versions:
        click.echo(f"no model versions in {registry}")
    for v in versions:
        click.echo(f"v{v.version}  {v.created_at}  rows={v.rows}  data={v.data_sha256}  {v.note}")


@model.command("export-data")
@click.option("--shared", required=True, type=click.Path(file_okay=False, exists=True),
              help="The shared data directory (../shared/data).")
@click.option("--out", required=True, type=OutputFile(), help="CSV file to write.")
@click.option("--all-sources", is_flag=True,
              help="Include Sia clusters whose data has no license (local use only).")
def export_cmd(shared: str, out: str, all_sources: bool) -> None:
    """Write public measurement sets as one canonical CSV.

    \b
    Examples:
      hase model export-data --shared ../shared/data --out train.csv   # the shipped sources
      hase model export-data --shared ../shared/data --out all.csv --all-sources
    """
    from slurm_hase.predict.dataset import write_csv
    from slurm_hase.predict.loaders import load_sia, shipped_rows

    rows = shipped_rows(shared)
    if all_sources:
        rows += load_sia(Path(shared) / "sia" / "traces", clusters=("azure", "dgx", "quad", "rtx"))
    click.echo(f"wrote {write_csv(rows, out)} rows to {out}")


@model.command("gpus")
@click.option("--json", "as_json", is_flag=True,
              help="Machine-readable output (every field, aliases and source included).")
def gpus_cmd(as_json: bool) -> None:
    """List the GPU catalog.

    \b
    Examples:
      hase model gpus
      hase model gpus --json
    """
    from slurm_hase.predict.catalog import catalog

    if as_json:
        click.echo(json.dumps([dataclasses.asdict(s) for s in catalog().values()], indent=2))
        return
    for s in catalog().values():
        click.echo(f"{s.key:<11} {s.name:<24} {s.generation:<7} {s.memory_gb:>5.0f}GB "
                   f"{s.mem_bw_gbs:>6.0f}GB/s fp32={s.fp32_tflops:.1f} tensor={s.tensor_tflops:.0f} TFLOPS")
