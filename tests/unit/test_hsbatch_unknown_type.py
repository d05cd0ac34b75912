"""hsbatch on a cluster with a GPU type the predictor's catalog does not know: that type gets no
prediction, the others are still predicted and narrowed, and the table shows it as unknown."""

from __future__ import annotations

from pathlib import Path

from slurm_hase.hsbatch import plan
from slurm_hase.hsbatch.judge import load_predict
from slurm_hase.hsbatch.text import explain_table
from slurm_hase.predict.api import Prediction
from slurm_hase.predict.descriptor import WorkloadDescriptor
from slurm_hase.slurm.runner import Runner
from slurm_hase.slurm.types import Node, Partition
from tests.unit.test_hsbatch_core import hsbatch, script

TYPES = ("a100", "t4", "gtx_titan_z")  # gtx_titan_z: not in the GPU catalog


def _cluster(runner: Runner) -> tuple[list[Node], list[Partition]]:
    nodes = [Node(f"{t}-1", "IDLE", features=(t,), partitions=("gpu",), gpus={t: 4}) for t in TYPES]
    return nodes, [Partition("gpu", default=True)]


def _job(tmp_path: Path) -> str:
    return script(tmp_path, "#SBATCH --gpus=1 -t 60\n#HASE model=resnet50 bs=64 iters=20000\n")


def test_an_unknown_type_does_not_switch_predictions_off(tmp_path: Path) -> None:
    """The shipped predictor: a100 is fast and finishes, t4 is too slow, gtx_titan_z unknown."""
    r = hsbatch(["--hase-explain", _job(tmp_path)], cluster_fn=_cluster, predictor=load_predict)
    (argv, _), = r.calls
    assert "--constraint=a100" in argv, r.err
    assert "predictor failed" not in r.err and "warning" not in r.err
    row = next(line for line in r.err.splitlines() if line.strip().startswith("gtx_titan_z"))
    assert "no: unknown" in row and not row.rstrip().endswith("*")
    assert "hsbatch: note: no prediction for GPU type gtx_titan_z (unknown to the predictor)" in r.err


def test_load_predict_skips_unknown_types_and_keeps_extrapolation() -> None:
    predict = load_predict("shipped")
    desc = WorkloadDescriptor(model="resnet50", batch_size=64, iterations=100)
    got = predict(desc, ["a100", "gtx_titan_z", "Tesla V100"])
    assert set(got) == {"a100", "Tesla V100"}
    assert got["a100"].iter_time_p50 > 0
    assert callable(getattr(getattr(predict, "__self__", None), "extrapolation", None))


def _pred(t: str, s: float) -> Prediction:
    return Prediction(t, s, s * 1.2, s * 100, s * 120)


def _rows(slack: float, limit_s: int | None = None) -> list[plan.TypeRow]:
    desc = WorkloadDescriptor(model="resnet50", iterations=100)
    types = {t: (4, True) for t in TYPES}
    preds = {"a100": _pred("a100", 0.1), "t4": _pred("t4", 1.0)}  # nothing for gtx_titan_z
    return plan.judge_types(types, desc, memory_of=lambda t: None, params_m=None,
                            time_limit_s=limit_s, predictions=preds, speed_slack=slack)


def test_an_unknown_type_is_never_kept_by_the_speed_limit() -> None:
    rows = {r.gpu_type: r for r in _rows(1.0)}
    assert rows["gtx_titan_z"].unknown and rows["gtx_titan_z"].fast is False
    assert not rows["gtx_titan_z"].candidate and not rows["a100"].unknown
    assert plan.choose_constraint(list(rows.values())) == ("a100", None)
    # without a speed limit only what is known drops a type: the time limit drops t4 alone
    assert plan.choose_constraint(_rows(0.0, limit_s=60)) == ("a100|gtx_titan_z", None)
    table = explain_table(_rows(0.0), None, None, [])
    assert "unknown" in next(x for x in table.splitlines() if "gtx_titan_z" in x)


def test_why_nothing_fits_says_the_time_limit_covers_the_predicted_types() -> None:
    msg = plan.why_nothing_fits(_rows(1.0, limit_s=5), None, 5)
    assert msg is not None and "on every GPU type with a prediction (fastest: a100, 10 s)" in msg
