"""What hsbatch predicts for a described job: the cluster's GPU types (cached per user), each
type's predicted runtime and fit, and why it goes on without them when that fails."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from slurm_hase.errors import SlurmError

if TYPE_CHECKING:
    from slurm_hase.hsbatch.argv import HaseOptions
    from slurm_hase.hsbatch.cluster import Summary
    from slurm_hase.hsbatch.core import Deps
    from slurm_hase.hsbatch.plan import PredictFn, TypeRow
    from slurm_hase.hsbatch.request import Request
    from slurm_hase.predict.descriptor import WorkloadDescriptor
    from slurm_hase.slurm.runner import Runner
    from slurm_hase.slurm.types import Node, Partition

QUERY_TIMEOUT_S = 5.0


def judge(
    req: Request, desc: WorkloadDescriptor, hopts: HaseOptions, deps: Deps, env: Mapping[str, str],
    slack: float = 0.0,
) -> tuple[list[TypeRow], list[str]]:
    from slurm_hase.hsbatch import plan

    summary = cluster_summary(deps, env)
    types, note = summary.types_for(req.partitions)
    notes = [note] if note else []
    predictions = None
    if plan.needs_predictions(req, desc, hopts.explain, slack):
        path = hopts.predictor or env.get("HASE_PREDICTOR") or None
        predict = (deps.predictor or load_predict)(path)
        predictions = predict(desc, list(types))
        # a bound Predictor.predict can say when the workload is outside its training data
        extrapolation = getattr(getattr(predict, "__self__", None), "extrapolation", None)
        if callable(extrapolation) and (why := extrapolation(desc)):
            notes.append(str(why))
        if unknown := [t for t in types if t not in predictions]:
            notes.append(f"no prediction for GPU type {', '.join(unknown)} (unknown to the "
                         "predictor)")
    params = plan.params_m(desc)
    memory_of = summary.memory_gb.get if params is not None or hopts.explain else _unknown
    rows = plan.judge_types(types, desc, memory_of=memory_of, params_m=params,
                            time_limit_s=req.time_limit_s, predictions=predictions,
                            speed_slack=slack)
    return rows, notes


def cluster_summary(deps: Deps, env: Mapping[str, str]) -> Summary:
    """The cluster summary: from the per-user cache when fresh, else from Slurm (then cached)."""
    from slurm_hase.hsbatch import cluster

    where = cluster.cache_dir(env) if deps.cache else None
    if where is not None:
        import time

        key, now = cluster.cache_key(env), time.time()
        hit = cluster.load(where, key, now)
        if hit is not None:
            return hit
    nodes, parts = (deps.cluster or _read_cluster)(deps.runner)
    summary = cluster.summarize(nodes, parts, _memory_gb)
    if where is not None:
        cluster.store(where, key, summary, now)
    return summary


def _read_cluster(runner: Runner) -> tuple[list[Node], list[Partition]]:
    """Nodes and partitions from ``scontrol show ... -o``, both asked at once (startup time)."""
    import threading

    from slurm_hase.slurm import commands
    from slurm_hase.slurm.parse_text import parse_scontrol_nodes, parse_scontrol_partitions

    argvs = {"nodes": commands.show_nodes(), "parts": commands.show_partitions()}
    out: dict[str, object] = {}

    def ask(key: str) -> None:
        try:
            out[key] = runner.run(argvs[key], timeout_s=QUERY_TIMEOUT_S).check().stdout
        except Exception as exc:  # re-raised below, in the caller's thread
            out[key] = exc

    threads = [threading.Thread(target=ask, args=(k,)) for k in argvs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for value in out.values():
        if isinstance(value, Exception):
            raise value
    return parse_scontrol_nodes(str(out["nodes"])), parse_scontrol_partitions(str(out["parts"]))


def load_predict(path: str | None) -> PredictFn:
    """The model file's predictions for the GPU types its catalog knows (a type it does not know
    gets none, and the other types are still predicted)."""
    from slurm_hase.predict.modelfile import load_predictor

    return load_predictor(path).predict_known


def _memory_gb(gpu_type: str) -> float | None:
    from slurm_hase.errors import PredictorError
    from slurm_hase.predict.catalog import resolve_gpu

    try:
        return resolve_gpu(gpu_type).memory_gb
    except PredictorError:
        return None


def _unknown(gpu_type: str) -> float | None:
    return None


def why_no_prediction(exc: BaseException) -> str:
    """Why hsbatch goes on without a prediction, on one line (scontrol's stderr has several)."""
    said = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    if isinstance(exc, SlurmError):
        return f"cannot read GPU types from Slurm ({said})"
    if isinstance(exc, ImportError):
        return f"predictor unavailable ({said})"
    return f"predictor failed ({type(exc).__name__}: {said})"
