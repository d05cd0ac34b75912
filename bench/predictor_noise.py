"""Where the predictor's random-split error sits, and how much of it an identity model can remove.

Run: ``.venv/bin/python bench/predictor_noise.py`` from the repo root (about 55 s; no ../shared
needed). Prints, on the shipped training data and the bench's random 5-fold split (seed 0):

- our model's MAPE and share of the total error per data source and per Gavel GPU type;
- beside it, on Gavel's co-located rows, an *identity* model that knows every workload by name:
  log t = e[workload, GPU] + s[workload, GPU] + p[co-runner, GPU] (ridge least squares on the
  training folds; exclusive rows fit e alone). It is not shippable (it cannot score a workload
  it has not seen) but it bounds what per-workload and per-co-runner levels can explain;
- the co-located Gavel entries whose throughput equals the isolated one exactly;
- a transfer oracle for the two held-out splits (leave-one-(model, GPU)-pair-out on the bench's
  40 sampled pairs, leave-one-GPU-type-out): each held-out row is predicted as the same workload
  with the same co-runners measured on another GPU type, times a constant fitted *on the held-out
  rows themselves* (per block, per block and model, per block, model and batch size), taking the
  other type that covers most rows. No predictor has those constants; the figure bounds what
  rescaling one other type's measurements can reach (docs/predictor.md, "How far a transfer
  can go");
- a richer, log-linear transfer oracle on the same splits: log time = an intercept (per model, or
  per model and batch size) + slopes on the workload's exclusive time and its slowdown on the
  other type (+ the co-runner's slowdown beside it on the held-out type, its mirror row), least
  squares on the held-out rows.

It is evidence for docs/predictor.md ("Noise in the data"), not a target.
"""

from __future__ import annotations

import itertools
import math
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.predictor import PAIR_FOLDS  # noqa: E402
from slurm_hase.predict.dataset import Measurement, read_csv  # noqa: E402
from slurm_hase.predict.evaluate import folds, predict_rows, sample_folds  # noqa: E402
from slurm_hase.predict.train import NUM_ROUNDS, train  # noqa: E402

SHIPPED_CSV = REPO / "slurm_hase" / "data" / "train_shipped.csv"
Key = tuple[object, ...]


def _workload(m: Measurement) -> Key:
    d = m.desc
    return (m.model, d.batch_size, d.num_gpus, d.precision, d.mode)


def _terms(m: Measurement) -> list[Key]:
    terms: list[Key] = [("e", _workload(m), m.gpu)]
    if m.desc.corunner_gflops:
        terms += [("s", _workload(m), m.gpu), ("p", tuple(sorted(m.desc.corunner_gflops)), m.gpu)]
    return terms


def identity_fit(rows: Sequence[Measurement], ridge: float = 1e-3) -> dict[Key, float]:
    """Ridge least squares of log time on one-hot workload / co-runner terms (module doc)."""
    cols: dict[Key, int] = {}
    terms = [[cols.setdefault(k, len(cols)) for k in _terms(m)] for m in rows]
    a = np.zeros((len(rows), len(cols)))
    for r, cs in enumerate(terms):
        a[r, cs] = 1.0
    b = np.log([m.iter_time_s for m in rows])
    x = np.linalg.solve(a.T @ a + ridge * np.eye(len(cols)), a.T @ b)
    return {k: float(x[i]) for k, i in cols.items()}


def identity_predict(coef: dict[Key, float], m: Measurement) -> float:
    """exp of the fitted terms; nan when a term was never seen in training."""
    terms = _terms(m)
    if any(k not in coef for k in terms):
        return math.nan
    return math.exp(sum(coef[k] for k in terms))


def clipped_entries(rows: Sequence[Measurement]) -> dict[str, int]:
    """Per GPU: Gavel co-located rows whose time equals the same workload's exclusive time."""
    excl = {(m.gpu, _workload(m)): m.iter_time_s for m in rows
            if m.source.startswith("gavel") and not m.desc.corunner_gflops}
    out: dict[str, int] = defaultdict(int)
    for m in rows:
        if m.source.startswith("gavel") and m.desc.corunner_gflops:
            e = excl.get((m.gpu, _workload(m)))
            if e is not None and abs(e - m.iter_time_s) <= 1e-9 * e:
                out[m.gpu] += 1
    return dict(out)


def mape_constant(truth: np.ndarray, base: np.ndarray) -> float:
    """The c minimising the MAPE of c * base against truth: the median of truth / base
    weighted by base / truth (the MAPE is piecewise linear in c, with those slopes)."""
    ratio, weight = truth / base, base / truth
    order = np.argsort(ratio)
    cum = np.cumsum(weight[order])
    return float(ratio[order][np.searchsorted(cum, cum[-1] / 2)])


def _transfer_key(m: Measurement) -> Key:
    return (_workload(m), _corunners(m))


def transfer_oracle(rows: Sequence[Measurement], test: Sequence[int],
                    group: Callable[[Measurement], Key]) -> dict[int, float]:
    """Row index -> absolute relative error of the transfer oracle (module doc) on one held-out
    block; rows with no counterpart on the chosen GPU type are left out."""
    held = {rows[i].gpu for i in test}
    by_gpu: dict[str, dict[Key, float]] = defaultdict(dict)
    for m in rows:
        if m.gpu not in held:
            by_gpu[m.gpu][_transfer_key(m)] = m.iter_time_s
    per_type: list[dict[int, float]] = []
    for gpu in sorted(by_gpu):
        table = by_gpu[gpu]
        groups: dict[Key, list[tuple[int, float]]] = defaultdict(list)
        for i in test:
            base = table.get(_transfer_key(rows[i]))
            if base is not None:
                groups[group(rows[i])].append((i, base))
        err: dict[int, float] = {}
        for members in groups.values():
            truth = np.asarray([rows[i].iter_time_s for i, _ in members])
            base_t = np.asarray([b for _, b in members])
            c = mape_constant(truth, base_t)
            err.update(zip((i for i, _ in members), np.abs(c * base_t - truth) / truth,
                           strict=True))
        per_type.append(err)
    return _most_covering(per_type)


def _most_covering(per_type: list[dict[int, float]]) -> dict[int, float]:
    """Of the other types' errors, those of the type covering most held-out rows (then the
    lowest mean error; the first in type order on a tie); {} when none covers any."""
    return max((e for e in per_type if e), default={},
               key=lambda e: (len(e), -float(np.mean(list(e.values())))))


def oracle_splits(rows: Sequence[Measurement]) -> dict[str, list[list[int]]]:
    """The held-out blocks of bench/predictor.py's pair-out (its sampled pairs) and GPU-out
    splits, by label."""
    pairs = sample_folds(folds(rows, "leave-one-pair-out"), PAIR_FOLDS)
    return {f"leave-one-pair-out ({PAIR_FOLDS} sampled pairs)": pairs,
            "leave-one-gpu-out": folds(rows, "leave-one-gpu-out")}


def print_oracle(title: str, splits: dict[str, list[list[int]]],
                 variants: dict[str, Callable[[Sequence[int]], dict[int, float]]]) -> None:
    """One line per split and variant: the MAPE of the variant's oracle over the blocks."""
    print(f"\n{title}:")
    for split, tests in splits.items():
        total = sum(len(t) for t in tests)
        for name, oracle in variants.items():
            errs = [e for t in tests for e in oracle(t).values()]
            print(f"  {split:38s} {name:40s} {100 * float(np.mean(errs)):5.1f}% "
                  f"({len(errs)} of {total} rows have a counterpart)")


def print_oracles(rows: Sequence[Measurement]) -> None:
    """Both transfer oracles (module doc) on the pair-out and GPU-out splits."""
    splits = oracle_splits(rows)
    grouping: dict[str, Callable[[Measurement], Key]] = {
        "one constant per held-out block": lambda m: (),
        "per block and model": lambda m: (m.model,),
        "per block, model and batch size": lambda m: (m.model, m.desc.batch_size,
                                                      m.desc.num_gpus)}
    print_oracle("transfer oracle (constants fitted on the held-out rows; a bound, not a model)",
                 splits, {name: partial(transfer_oracle, rows, group=group)
                          for name, group in grouping.items()})
    intercepts: dict[str, Callable[[Measurement], Key]] = {
        "per model": lambda m: (m.model,),
        "per model and batch size": lambda m: (m.model, m.desc.batch_size, m.desc.num_gpus)}
    print_oracle("log-linear transfer oracle (intercepts and slopes fitted on the held-out rows)",
                 splits, {name + (" + mirror rows" if mirror else ""):
                          partial(loglinear_oracle, rows, intercept=key, mirror=mirror)
                          for (name, key), mirror in itertools.product(intercepts.items(),
                                                                       (False, True))})


def loglinear_oracle(rows: Sequence[Measurement], test: Sequence[int],
                     intercept: Callable[[Measurement], Key], mirror: bool) -> dict[int, float]:
    """Row index -> error of a richer transfer oracle on one held-out block (module doc):
    log t = a[intercept key] + b log(the workload's exclusive time on the other type)
    + c log(its slowdown there beside the same co-runners) [+ d log(the co-runner's own slowdown
    beside it on the held-out type, its mirror row) + e (mirror found)], least squares on the
    held-out rows. Features come from the rows outside the block only."""
    held = set(test)
    gpus = {rows[i].gpu for i in test}
    times: dict[Key, float] = {(m.gpu, _workload(m), _corunners(m)): m.iter_time_s
                               for i, m in enumerate(rows) if i not in held}
    by_gflops: dict[float, list[Key]] = defaultdict(list)
    for m in rows:
        gflops = m.desc.gflops_per_iter
        if gflops is not None and _workload(m) not in by_gflops[gflops]:
            by_gflops[gflops].append(_workload(m))
    per_type: list[dict[int, float]] = []
    for other in sorted({m.gpu for m in rows} - gpus):
        feats: list[list[float]] = []
        keys: list[Key] = []
        idx: list[int] = []
        for i in test:
            m = rows[i]
            alone = times.get((other, _workload(m), ()))
            there = times.get((other, _workload(m), _corunners(m)))
            if alone is None or there is None:
                continue
            f = [math.log(alone), math.log(there / alone)]
            if mirror:
                f += _mirror(m, times, by_gflops)
            feats.append(f)
            keys.append(intercept(m))
            idx.append(i)
        if len(idx) < 2:
            continue
        levels = sorted(set(keys), key=repr)
        a = np.array([[1.0 if k == lv else 0.0 for lv in levels] + f
                      for k, f in zip(keys, feats, strict=True)])
        y = np.log([rows[i].iter_time_s for i in idx])
        coef = np.linalg.lstsq(a, y, rcond=None)[0]
        err = np.abs(np.exp(a @ coef - y) - 1.0)
        per_type.append(dict(zip(idx, err.tolist(), strict=True)))
    return _most_covering(per_type)


def _corunners(m: Measurement) -> Key:
    return tuple(sorted(m.desc.corunner_gflops or ()))


def _mirror(m: Measurement, times: dict[Key, float], by_gflops: dict[float, list[Key]]
            ) -> list[float]:
    """[log slowdown of m's one co-runner beside m on m's GPU, 1] from rows outside the block,
    [0, 0] where there is no such row (or several co-runners)."""
    co = m.desc.corunner_gflops or ()
    if len(co) != 1 or m.desc.gflops_per_iter is None:
        return [0.0, 0.0]
    for other in by_gflops.get(co[0], []):
        beside = times.get((m.gpu, other, (m.desc.gflops_per_iter,)))
        alone = times.get((m.gpu, other, ()))
        if beside is not None and alone is not None:
            return [math.log(beside / alone), 1.0]
    return [0.0, 0.0]


def main() -> None:
    rows = read_csv(SHIPPED_CSV)
    n = len(rows)
    ours = np.full(n, math.nan)
    ident = np.full(n, math.nan)
    gavel = [i for i, m in enumerate(rows) if m.source.startswith("gavel")]
    gavel_set = set(gavel)
    for test in folds(rows, "random", seed=0):
        held = set(test)
        train_rows = [m for i, m in enumerate(rows) if i not in held]
        model = train(train_rows, rounds=NUM_ROUNDS, with_p90=False)
        ours[test] = predict_rows(model, [rows[i] for i in test])
        coef = identity_fit([rows[i] for i in range(n) if i not in held and i in gavel_set])
        for i in test:
            if i in gavel_set:
                ident[i] = identity_predict(coef, rows[i])
    truth = np.asarray([m.iter_time_s for m in rows])
    err = np.abs(ours - truth) / truth
    ierr = np.abs(ident - truth) / truth
    total = float(err.sum())
    print(f"random 5-fold split, {n} rows: our MAPE {100 * err.mean():.1f}%\n")
    print(f"{'rows':38s} {'n':>5s} {'ours':>7s} {'share':>6s} {'identity':>9s}")
    groups: dict[str, list[int]] = defaultdict(list)
    for i, m in enumerate(rows):
        src = m.source.split(":")[0] or "site"
        if src == "gavel":
            kind = "co-located" if m.desc.corunner_gflops else "exclusive"
            groups[f"gavel {m.gpu} {kind}"].append(i)
        else:
            groups[src].append(i)
    for name in sorted(groups):
        idx = np.asarray(groups[name])
        known = idx[~np.isnan(ident[idx])]
        ident_txt = (f"{100 * ierr[known].mean():8.1f}%"
                     if name.startswith("gavel") and name.endswith("co-located") and len(known)
                     else f"{'-':>9s}")
        print(f"{name:38s} {len(idx):5d} {100 * err[idx].mean():6.1f}% "
              f"{err[idx].sum() / total:6.2f} {ident_txt}")
    print("\nGavel co-located entries equal to the isolated time exactly:", clipped_entries(rows))
    print_oracles(rows)


if __name__ == "__main__":
    main()
