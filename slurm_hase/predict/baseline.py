"""The HASE paper's predictor style, trained on the same rows: the baseline every figure is a
ratio against (issue #5)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from slurm_hase.predict.catalog import resolve_gpu
from slurm_hase.predict.dataset import Measurement


@dataclass
class HaseBaseline:
    """HASE-paper-style predictor: a random forest on job GFLOPs, co-runner GFLOPs and per-GPU
    reference benchmark times (here spec-derived: seconds per TFLOP at FP32 and per GB read)."""

    boosters: list[str] = field(default_factory=list)
    _model: Any = None

    @staticmethod
    def features(rows: Sequence[Measurement]) -> Any:
        import numpy as np

        out = []
        for m in rows:
            spec = resolve_gpu(m.gpu)
            g = m.desc.gflops_per_iter or 1.0
            co = sum(m.desc.corunner_gflops)
            out.append([g, co, len(m.desc.corunner_gflops), m.desc.num_gpus,
                        1.0 / spec.fp32_tflops, 1.0 / spec.mem_bw_gbs])
        return np.asarray(out, dtype=float).reshape(len(rows), 6)

    def fit(self, rows: Sequence[Measurement]) -> HaseBaseline:
        """Random forest (LightGBM rf mode, bagged full trees) on log iteration time."""
        import lightgbm as lgb
        import numpy as np

        x = self.features(rows)
        y = np.log(np.asarray([m.iter_time_s for m in rows]))
        params = {"boosting": "rf", "objective": "regression", "num_leaves": 255, "min_data_in_leaf": 2,
                  "bagging_fraction": 0.632, "bagging_freq": 1, "feature_fraction": 0.8,
                  "verbose": -1, "num_threads": 1, "deterministic": True, "seed": 7}
        self._model = lgb.train(params, lgb.Dataset(x, y), num_boost_round=100)
        return self

    def predict(self, rows: Sequence[Measurement]) -> Any:
        import numpy as np

        return np.exp(self._model.predict(self.features(rows)))
