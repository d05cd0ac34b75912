"""Benchmark of the performance predictor: accuracy vs the HASE-style baseline, speed, refit.

Run: ``.venv/bin/python bench/predictor.py`` (or ``python -m bench.predictor``) from the repo root,
with ../shared/data beside the checkout (for the refit replay). ``--quick`` samples fewer folds.
"""

from __future__ import annotations

import argparse
import math
import random
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from slurm_hase.errors import HaseError  # noqa: E402
from slurm_hase.predict.catalog import gpu_keys, resolve_gpu  # noqa: E402
from slurm_hase.predict.dataset import Measurement, parse_csv, read_csv  # noqa: E402
from slurm_hase.predict.descriptor import WorkloadDescriptor  # noqa: E402
from slurm_hase.predict.evaluate import cross_validate, mape, predict_rows  # noqa: E402
from slurm_hase.predict.modelfile import load_predictor  # noqa: E402
from slurm_hase.slurm.types import AccountingRecord, JobState  # noqa: E402

SHIPPED_CSV = REPO / "slurm_hase" / "data" / "train_shipped.csv"
SHARED = REPO.parent / "shared" / "data"
TARGETS = {"random": 8.0, "leave-one-pair-out": 15.0, "leave-one-gpu-out": 25.0, "co-located (random)": 15.0}


PAIR_FOLDS = 40  # (model, GPU) pairs sampled for the leave-one-pair-out split


def accuracy(rows: list[Measurement], pair_folds: int) -> list[tuple[str, float, float, float]]:
    """(split, ours MAPE, baseline MAPE, target) rows."""
    out: list[tuple[str, float, float, float]] = []
    for split, max_folds in (("random", None), ("leave-one-pair-out", pair_folds),
                             ("leave-one-gpu-out", None), ("leave-one-model-out", None)):
        t0 = time.perf_counter()
        r = cross_validate(rows, split, max_folds=max_folds)
        ours, base = r["ours"], r["hase_baseline"]
        label = split if max_folds is None else f"{split} ({max_folds} sampled pairs)"
        out.append((label, ours.mape, base.mape, TARGETS.get(split, float("nan"))))
        if split == "random":
            assert ours.mape_colocated is not None and base.mape_colocated is not None
            out.append(("co-located (random)", ours.mape_colocated, base.mape_colocated, TARGETS["co-located (random)"]))
        print(f"  .. {label}: {time.perf_counter() - t0:.0f}s; ours per GPU {ours.per_gpu}", file=sys.stderr)
    return out


def p90_coverage(rows: list[Measurement]) -> tuple[float, float]:
    """Share of held-out rows (random 5-fold split, models trained with their P90) whose measured
    time is at or below the predicted P90: all rows, co-located rows."""
    from slurm_hase.predict.evaluate import folds
    from slurm_hase.predict.train import train

    hits: list[bool] = []
    hits_co: list[bool] = []
    for test in folds(rows, "random", seed=0):
        held = set(test)
        model = train([m for i, m in enumerate(rows) if i not in held])
        for i in test:
            m = rows[i]
            ok = m.iter_time_s <= model.predict(m.desc, [m.gpu])[m.gpu].iter_time_p90
            hits.append(ok)
            if m.desc.corunner_gflops:
                hits_co.append(ok)
    return sum(hits) / len(hits), sum(hits_co) / max(len(hits_co), 1)


def speed() -> list[tuple[str, float]]:
    """Timings in seconds."""
    pred = load_predictor()
    rng = random.Random(0)
    models = ["resnet50", "resnet18", "vgg16", "bert-base", "bert-large", "gpt2", "transformer",
              "lstm-lm", "recommendation", "yolov3", "deepspeech2", "ncf"]
    descs = [WorkloadDescriptor(model=rng.choice(models), batch_size=rng.choice([8, 16, 32, 64, 128]),
                                precision=rng.choice(["fp32", "fp16"]), mode=rng.choice(["train", "infer"]))
             for _ in range(10_000)]
    gpus = gpu_keys()[:20]
    pred.predict_many(descs[:10], gpus)  # warm the bulk evaluator
    t0 = time.perf_counter()
    arr = pred.predict_many(descs, gpus)
    bulk = time.perf_counter() - t0
    assert arr.shape == (10_000, 20)
    distinct = [WorkloadDescriptor(gflops_per_iter=rng.uniform(1.0, 5000.0), params_m=rng.uniform(1.0, 500.0),
                                   batch_size=rng.randint(1, 512)) for _ in range(10_000)]
    t0 = time.perf_counter()
    pred.predict_many(distinct, gpus)
    bulk_distinct = time.perf_counter() - t0
    code = ("import time;t=time.perf_counter();from slurm_hase.predict.modelfile import load_predictor;"
            "from slurm_hase.predict.descriptor import WorkloadDescriptor as W;"
            "p=load_predictor();p.predict(W(model='resnet50',batch_size=64),['a100','v100','t4']);"
            "print(time.perf_counter()-t)")
    cold = []
    for _ in range(5):
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
        cold.append(float(res.stdout.strip()))
    cold.sort()
    return [("predict_many 10,000 jobs (12 models x batch/prec/mode mix) x 20 GPU types", bulk),
            ("predict_many 10,000 all-distinct jobs x 20 GPU types (worst case)", bulk_distinct),
            ("import + load shipped model + 1 predict (fresh interpreter, median of 5)", cold[2])]


def sia_records(seed: int = 0) -> list[AccountingRecord]:
    """Completed jobs replayed from Sia step times on GPU types absent from the shipped data."""
    from slurm_hase.predict.loaders import load_sia

    rows = load_sia(SHARED / "sia" / "traces", clusters=("azure", "dgx", "quad", "rtx"))
    rng = random.Random(seed)
    rng.shuffle(rows)
    recs = []
    for i, m in enumerate(rows[:3000]):
        iters = rng.choice([500, 1000, 5000])
        desc = WorkloadDescriptor(model=m.desc.model, batch_size=m.desc.batch_size, num_gpus=m.desc.num_gpus,
                                  iterations=iters)
        recs.append(AccountingRecord(job_id=str(1000 + i), name="replay", account="a", user="u",
                                     state=JobState.COMPLETED, elapsed_s=max(1, round(m.iter_time_s * iters)),
                                     alloc_gpus={m.gpu: m.desc.num_gpus}, comment=desc.to_comment()))
    return recs


class ReplayBackend:
    """A fake SlurmBackend.accounting() over replayed records."""

    def __init__(self, records: list[AccountingRecord]) -> None:
        self.records = records

    def accounting(self, *, since: str = "now-1day", until: str = "now",
                   job_ids: Sequence[str] = ()) -> list[AccountingRecord]:
        return list(self.records)


def refit_demo() -> tuple[int, int, float, float]:
    """(history jobs, following jobs, MAPE before, MAPE after) on the following jobs."""
    from slurm_hase.predict.refit import harvest, harvest_backend, refit

    recs = sia_records()
    half = len(recs) // 2
    history = harvest_backend(ReplayBackend(recs[:half])).rows
    following = harvest(recs[half:]).rows
    true = [m.iter_time_s for m in following]
    before = mape(predict_rows(load_predictor(), following), true)
    after_model = refit(read_csv(SHIPPED_CSV), history)
    after = mape(predict_rows(after_model, following), true)
    return len(history), len(following), before, after


def ranking(pred: Sequence[float], rows: Sequence[Measurement]) -> tuple[int, int, float]:
    """How well predictions rank GPU types for each workload measured on two or more of them:
    (workloads whose predicted-fastest type is the measured fastest, workloads, mean extra time
    of the predicted-fastest type over the measured fastest). Placing a job where it finishes
    soonest needs this ranking more than an exact time."""
    by_workload: dict[tuple[str, int, int], dict[str, tuple[float, float]]] = defaultdict(dict)
    for m, p in zip(rows, pred, strict=True):
        by_workload[(m.model, m.desc.batch_size or 0, m.desc.num_gpus)][m.gpu] = (p, m.iter_time_s)
    right = n = 0
    extra = 0.0
    for times in by_workload.values():
        if len(times) < 2:
            continue
        n += 1
        pick = min(times, key=lambda g: times[g][0])
        best = min(times, key=lambda g: times[g][1])
        right += pick == best
        extra += times[pick][1] / times[best][1] - 1.0
    return right, n, 100.0 * extra / max(n, 1)


def sia_ranking(rows: list[Measurement]) -> list[tuple[str, tuple[int, int, float]]]:
    """ranking() of the shipped model and of the HASE baseline (trained on the shipped data) on
    Sia's step times: A100, V100 32 GB, RTX 6000 and RTX 2080 Ti have no training rows, T4 has."""
    from slurm_hase.predict.baseline import HaseBaseline
    from slurm_hase.predict.loaders import load_sia

    sia = load_sia(SHARED / "sia" / "traces", clusters=("azure", "dgx", "quad", "rtx", "aws"))
    base = [float(p) for p in HaseBaseline().fit(rows).predict(sia)]
    return [("ours", ranking(predict_rows(load_predictor(), sia), sia)), ("HASE-RF", ranking(base, sia))]


def bad_inputs() -> list[tuple[str, str]]:
    """(case, message) for each rejected input."""
    out: list[tuple[str, str]] = []

    def grab(case: str, fn: object) -> None:
        try:
            fn()  # type: ignore[operator]
            out.append((case, "NOT REJECTED"))
        except HaseError as exc:
            out.append((case, str(exc)))

    grab("unknown GPU 'a1000'", lambda: resolve_gpu("a1000"))
    grab("CSV without iter_time_s", lambda: parse_csv("gpu,model,batch_size\nv100,resnet50,32\n", "site.csv"))
    grab("negative batch size",
         lambda: parse_csv("gpu,model,batch_size,iter_time_s\nv100,resnet50,32,0.2\nv100,resnet50,-4,0.1\n", "site.csv"))
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        fh.write('{"format": "slurm-hase-predictor", "version": 1, "boost')
    grab("corrupt model file", lambda: load_predictor(fh.name))
    Path(fh.name).unlink()
    return out


def main() -> None:
    """Print the benchmark tables."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help=f"sample 10 pairs instead of {PAIR_FOLDS}")
    args = ap.parse_args()
    rows = read_csv(SHIPPED_CSV)
    print(f"shipped data: {len(rows)} rows, {len({m.gpu for m in rows})} GPU types, "
          f"{len({m.model for m in rows})} models (Gavel MIT + MLPerf Apache-2.0 + Pollux T4 Apache-2.0)\n")
    print(f"{'split':<44}{'ours MAPE':>10}{'HASE-RF':>10}{'ratio':>7}{'target':>8}  ok")
    for split, ours, base, target in accuracy(rows, 10 if args.quick else PAIR_FOLDS):
        ok = "yes" if (ours <= target or math.isnan(target)) and ours < base else "NO"
        print(f"{split:<44}{ours:>9.1f}%{base:>9.1f}%{ours / base:>7.2f}{target:>7.0f}%  {ok}")
    cov, cov_co = p90_coverage(rows)
    print(f"\nP90 coverage (held-out rows at or below their P90, random split): {100 * cov:.1f}% "
          f"(co-located {100 * cov_co:.1f}%; a calibrated P90 covers ~90%)")
    print()
    for what, secs in speed():
        print(f"{what:<76}{secs * 1e3:>9.1f} ms")
    print()
    if (SHARED / "sia").is_dir():
        h, f, before, after = refit_demo()
        print(f"refit replay (Sia step times on V100-32GB/A100/RTX6000/2080Ti as sacct jobs): "
              f"{h} history jobs, {f} following jobs")
        print(f"  MAPE on the following jobs: shipped model {before:.1f}% -> after refit {after:.1f}%")
        print("GPU-type ranking on Sia workloads measured on 2+ types (no refit; not a target):")
        for who, (right, n, extra) in sia_ranking(rows):
            print(f"  {who:<8} fastest type picked right for {right}/{n} workloads; "
                  f"the pick runs {extra:.1f}% longer than the best on average")
    else:
        print("refit replay skipped: needs ../shared/data/sia")
    print()
    for case, msg in bad_inputs():
        print(f"{case:<28} -> {msg}")


if __name__ == "__main__":
    main()
