"""bench/predictor_noise.py's transfer oracle: the bound docs/predictor.md quotes."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.predictor_noise import mape_constant, transfer_oracle  # noqa: E402
from slurm_hase.predict.dataset import parse_csv  # noqa: E402

HEADER = "gpu,model,gflops_per_iter,params_m,batch_size,precision,mode,num_gpus,corunner_gflops,iter_time_s\n"


def test_mape_constant_is_the_minimum_of_the_mape() -> None:
    rng = np.random.default_rng(3)
    for _ in range(50):
        truth, base = rng.lognormal(0, 1, 7), rng.lognormal(0, 1, 7)
        c = mape_constant(truth, base)
        grid = np.exp(np.linspace(-6, 6, 4001))
        best = min(float(np.mean(np.abs(g * base - truth) / truth)) for g in grid)
        assert np.mean(np.abs(c * base - truth) / truth) <= best + 1e-12


def test_transfer_oracle_is_exact_for_a_rescaled_gpu_and_not_otherwise() -> None:
    # v100 = p100 / 2 for every workload, so the oracle is exact on a held-out v100; k80 has
    # one row off the common scale, which no single constant can absorb
    rows = parse_csv(HEADER + "".join(
        f"{g},resnet50,{f},25,{b},fp32,train,1,{co},{t_g}\n"
        for b, f, t in ((16, 65.0, 0.2), (32, 130.0, 0.35), (64, 260.0, 0.6))
        for co in ("", "53.28")
        for g, t_g in (("p100", t), ("v100", t / 2), ("k80", t * (4 if b < 64 else 9)))))
    held_v100 = [i for i, m in enumerate(rows) if m.gpu == "v100"]
    err = transfer_oracle(rows, held_v100, lambda m: ())
    assert sorted(err) == held_v100
    assert max(err.values()) == pytest.approx(0.0, abs=1e-12)
    held_k80 = [i for i, m in enumerate(rows) if m.gpu == "k80"]
    assert max(transfer_oracle(rows, held_k80, lambda m: ()).values()) > 0.1
    # per batch size the constants absorb it
    per_batch = transfer_oracle(rows, held_k80, lambda m: (m.desc.batch_size,))
    assert max(per_batch.values()) == pytest.approx(0.0, abs=1e-12)


def test_transfer_oracle_leaves_out_rows_without_a_counterpart() -> None:
    rows = parse_csv(HEADER + "v100,bert,100,110,8,fp32,train,1,,0.1\n"
                              "p100,bert,100,110,8,fp32,train,1,,0.3\n"
                              "v100,gpt2,200,124,8,fp32,train,1,,0.5\n")
    err = transfer_oracle(rows, [0, 2], lambda m: ())
    assert list(err) == [0]
