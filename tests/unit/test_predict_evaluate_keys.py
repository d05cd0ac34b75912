"""Evaluation folds and per-model scores know a model by ``model_key``, as training does: rows
spelled ``lstm``, ``LSTM-LM`` and ``lstm-lm`` are one model, never split across folds."""

from __future__ import annotations

from slurm_hase.predict.dataset import Measurement, make
from slurm_hase.predict.evaluate import folds, score

SPELLINGS = [("lstm-lm", "v100"), ("lstm", "v100"), ("LSTM-LM", "a100"), ("resnet50", "v100"),
             ("ResNet50", "v100"), ("resnet50", "a100")]


def _rows() -> list[Measurement]:
    return [make(gpu, name, None, None, 32, "fp32", "train", 1, (), 0.05 + 0.01 * i, f"t:{i}")
            for i, (name, gpu) in enumerate(SPELLINGS)]


def test_leave_one_model_out_holds_out_every_spelling() -> None:
    assert sorted(folds(_rows(), "leave-one-model-out")) == [[0, 1, 2], [3, 4, 5]]


def test_leave_one_pair_out_groups_by_model_key_and_gpu() -> None:
    assert sorted(folds(_rows(), "leave-one-pair-out")) == [[0, 1], [2], [3, 4], [5]]


def test_per_model_scores_are_by_model_key() -> None:
    rows = _rows()
    s = score(rows, [m.iter_time_s for m in rows])
    assert set(s.per_model) == {"lstm-lm", "resnet50"} and s.per_model["lstm-lm"] == 0.0
