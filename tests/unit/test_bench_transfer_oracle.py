"""bench/predictor_noise.py's transfer oracle: the bound docs/predictor.md quotes."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.predictor_noise import loglinear_oracle, mape_constant, transfer_oracle  # noqa: E402
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


def test_loglinear_oracle_is_exact_where_times_follow_its_form() -> None:
    # v100 time = 0.4 x (p100 exclusive time) x (p100 slowdown) ** 0.5: one intercept and two
    # slopes; plain rescaling cannot absorb the square root
    lines = []
    for b, t in ((16, 0.2), (32, 0.35), (64, 0.6), (128, 1.1)):
        for co, slow in (("", 1.0), ("53.28", 1.8), ("106.56", 2.6)):
            lines.append(f"p100,resnet50,{b * 4.0},25,{b},fp32,train,1,{co},{t * slow}\n")
            lines.append(f"v100,resnet50,{b * 4.0},25,{b},fp32,train,1,{co},"
                         f"{0.4 * t * slow ** 0.5}\n")
    rows = parse_csv(HEADER + "".join(lines))
    held = [i for i, m in enumerate(rows) if m.gpu == "v100"]
    err = loglinear_oracle(rows, held, lambda m: (m.model,), mirror=False)
    assert sorted(err) == held
    assert max(err.values()) == pytest.approx(0.0, abs=1e-9)
    assert max(transfer_oracle(rows, held, lambda m: ()).values()) > 0.05


def test_loglinear_oracle_reads_the_mirror_row_outside_the_block() -> None:
    # resnet50 on v100 is held out; its slowdown there follows lstm's slowdown beside it on v100
    # (the mirror rows, outside the block), not its slowdown on p100 (always 1.5)
    lines = []
    lstm = {8: 10.0, 16: 20.0, 32: 40.0}  # lstm batch -> GFLOPs per iteration
    for b, t in ((16, 0.2), (64, 0.6)):
        g = b * 4.0
        lines.append(f"p100,resnet50,{g},25,{b},fp32,train,1,,{t}\n")
        lines.append(f"v100,resnet50,{g},25,{b},fp32,train,1,,{t / 2}\n")
        for lb, lg in lstm.items():
            mirror_slow = 1.0 + lb / 16
            lines.append(f"p100,resnet50,{g},25,{b},fp32,train,1,{lg},{t * 1.5}\n")
            lines.append(f"v100,resnet50,{g},25,{b},fp32,train,1,{lg},{t / 2 * mirror_slow}\n")
            lines.append(f"v100,lstm-lm,{lg},20,{lb},fp32,train,1,{g},{0.1 * mirror_slow}\n")
    for lb, lg in lstm.items():
        lines.append(f"v100,lstm-lm,{lg},20,{lb},fp32,train,1,,0.1\n")
    rows = parse_csv(HEADER + "".join(lines))
    held = [i for i, m in enumerate(rows) if m.gpu == "v100" and m.model == "resnet50"]
    with_mirror = loglinear_oracle(rows, held, lambda m: (m.model,), mirror=True)
    without = loglinear_oracle(rows, held, lambda m: (m.model,), mirror=False)
    assert sorted(with_mirror) == held
    assert max(with_mirror.values()) == pytest.approx(0.0, abs=1e-9)
    assert max(without.values()) > 0.05
