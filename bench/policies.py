"""Policy benchmark: every policy on the same real traces and loads; one table, one plot.

    .venv/bin/python bench/policies.py                 # Philly, all policies, seeds 0,1,2 (~6 min)
    .venv/bin/python bench/policies.py --scenario philly-3type --scenario gavel-msr  # + ~1 min/seed
    .venv/bin/python bench/policies.py --scenario gavel-msr --split-gpus  # ablation (below)
    .venv/bin/python bench/policies.py --scenario alibaba-mps  # Alibaba pods, MPS shares (~2 min)
    .venv/bin/python bench/policies.py --scenario philly-a100-v100-t4  # the brief's fleet (~6 min)
    .venv/bin/python bench/policies.py --scenario alibaba-p100-t4-v100  # Alibaba's own types
    .venv/bin/python bench/policies.py --speed         # + 100,000 jobs on 2,000 GPUs (fifo)
    .venv/bin/python bench/policies.py --speed --speed-policy fifo --speed-policy fair
    .venv/bin/python bench/policies.py --speed-only --speed-policy fair   # the speed run alone
    .venv/bin/python bench/policies.py --speed-only --speed-policy fair --speed-policy fifo  # + fair / fifo
    .venv/bin/python bench/policies.py --speed-only --speed-policy fair --compiled  # mypyc build
    .venv/bin/python bench/policies.py --jobs 2000     # bigger window (~10 min)

Writes bench/out/policies.md (table + must-show ratios), policies.csv, policies.json and
policies.png. Needs ../shared/data (Philly/Alibaba may not be copied into the repo).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import resource
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

REPO = Path(__file__).resolve().parents[1]
# --compiled runs this script again with HASE_BENCH_BUILD naming the compiled build: first
sys.path[:0] = [p for p in (os.environ.get("HASE_BENCH_BUILD"), str(REPO)) if p]

from bench import compiled  # noqa: E402
from slurm_hase.predict.modelfile import load_predictor  # noqa: E402
from slurm_hase.sim.cluster import uniform_cluster  # noqa: E402
from slurm_hase.sim.compare import mean_se  # noqa: E402
from slurm_hase.sim.engine import SimConfig  # noqa: E402
from slurm_hase.sim.metrics import account_metrics  # noqa: E402
from slurm_hase.sim.predicted import predicted_table  # noqa: E402
from slurm_hase.sim.report import (  # noqa: E402
    DEFAULT_DATA,
    TraceSetup,
    prepare_trace,
    resolve_trace,
    run,
    throughput_table,
)

SLACK = 1.0  # hsbatch's default HASE_SPEED_SLACK
DAY, WEEK = 86400.0, 7 * 86400.0  # usage half-lives of the daemon's ledger (default: a week)

FAST_ROW = "fair-sfq0-floor0.57-yf3-narrow+ckpt-15s"
SHARE_ROW = "fair-sfq0-floor0.57-yf3-narrow+ckpt+share-15s"


class Row(NamedTuple):
    """One policy row of the bench: how the jobs come in and how the daemon runs."""

    label: str
    policy: str
    knobs: dict[str, float]
    billing: dict[str, float]  # TRESBillingWeights per GPU type (the slurm-billing baseline)
    ckpt: float  # share of jobs that opt in to checkpoint + requeue
    slack: float  # hsbatch speed slack: 0 = jobs come through plain sbatch (no slurm-hase)
    half_life_s: float  # usage half-life of the daemon's ledger
    cycle_s: float = 60.0  # seconds between daemon cycles (the daemon's default interval_s)
    share: float = 0.0  # share of 1-GPU jobs that opt in to MPS pairing (share=yes)


POLICIES: list[Row] = [
    Row("slurm-fifo", "fifo", {}, {}, 0.0, 0.0, WEEK),
    Row("slurm-billing", "fifo", {}, {"k80": 1.0, "p100": 2.0, "v100": 4.0}, 0.0, 0.0, WEEK),
    Row("gavel", "gavel", {}, {}, 0.0, 0.0, WEEK),
    Row("gavel-hsbatch", "gavel", {}, {}, 0.0, SLACK, WEEK),
    Row("hase", "hase", {}, {}, 0.0, 0.0, WEEK),
    Row("hase-hsbatch", "hase", {}, {}, 0.0, SLACK, WEEK),
    Row("fair-0.2-sbatch", "fair", {"theta": 0.2}, {}, 0.0, 0.0, WEEK),
    Row("fair-0.0", "fair", {"theta": 0.0}, {}, 0.0, SLACK, WEEK),
    Row("fair-0.2", "fair", {"theta": 0.2}, {}, 0.0, SLACK, WEEK),
    Row("fair-0.5", "fair", {"theta": 0.5}, {}, 0.0, SLACK, WEEK),
    Row("fair-0.2+ckpt50", "fair", {"theta": 0.2}, {}, 0.5, SLACK, WEEK),
    Row("fair-0.2+ckpt", "fair", {"theta": 0.2}, {}, 1.0, SLACK, WEEK),
    # the daemon's usage half-life (half_life_s) at 1 day instead of 7: see bench/README.md
    Row("fair-0.2+ckpt-hl1d", "fair", {"theta": 0.2}, {}, 1.0, SLACK, DAY),
    # idle fill (off by default): opted-in jobs of accounts below half their entitlement that
    # would wait >= 2 h start now on idle slow GPUs and migrate later (policy/route.py)
    Row("fair-0.2+ckpt-fill", "fair", {"theta": 0.2, "idle_fill": 0.5}, {}, 1.0, SLACK, WEEK),
    # fairness first (docs/daemon.md item 10): one shortest-first order over all accounts
    # (sfq 0), accounts below 0.6 x their entitlement first
    Row("fair-sfq0-floor0.6+ckpt", "fair", {"theta": 0.2, "sfq": 0.0, "floor": 0.6}, {}, 1.0,
        SLACK, WEEK),
    # the same, with rotation's gap test (narrow), victims needing 3x the waiting job's runtime
    # left (yield_factor 3), floor 0.57 and the daemon's cycle every 15 s (bench/README.md,
    # session 23): a small account's short job no longer waits a minute at level 0
    Row(FAST_ROW, "fair", {"theta": 0.2, "sfq": 0.0, "floor": 0.57, "yield_factor": 3.0,
                           "narrow": 1.0}, {}, 1.0, SLACK, WEEK, cycle_s=15.0),
    # the same, with every 1-GPU job opted in to pairing (share=yes): a waiting one becomes a
    # half-GPU MPS share where two get 1.5x one job's work done, for accounts at >= 0.8 of
    # their entitlement (policy/pairing.py; bench/README.md, session 46)
    Row(SHARE_ROW, "fair", {"theta": 0.2, "sfq": 0.0, "floor": 0.57, "yield_factor": 3.0,
                            "narrow": 1.0, "share_gain": 1.5}, {}, 1.0, SLACK, WEEK,
        cycle_s=15.0, share=1.0),
]
COLUMNS = ["scenario", "seed", "policy", "jobs", "avg_jct_s", "p99_jct_s", "avg_wait_s",
           "makespan_s", "rho_p99", "rho_max", "rho_gt1_share", "jain_accounts",
           "jain_accounts_1d", "requeues", "upd_per_cycle", "util", "wall_s"]

Task = tuple[str, dict[str, Any], Row]  # (scenario name, scenario with its seed, policy row)


def _one(args: Task) -> dict[str, Any]:
    scenario, sc, row = args
    # the billing baseline charges the scenario's types by speed (1 / 2 / 4), as row.billing
    # does Gavel's three
    spec = uniform_cluster(sc["gpus"], billing=sc.get("billing", row.billing) if row.billing
                           else {})
    table = throughput_table(Path(sc["data"]))
    if sc.get("predicted"):  # types Gavel did not measure: predicted speeds (sim/predicted.py)
        table = predicted_table(table, list(sc["gpus"]), load_predictor())
    setup = TraceSetup(resolve_trace(sc["trace"], Path(sc["data"])), start=sc["start"],
                       count=sc["count"], load=sc["load"], seed=sc["seed"])
    jobs = prepare_trace(setup, table, spec)
    if sc.get("split_gpus"):
        # ablation: a g-GPU job becomes g 1-GPU jobs (same account, arrival, duration, work)
        jobs = [dataclasses.replace(j, job_id=f"{j.job_id}.{k}", num_gpus=1)
                for j in jobs for k in range(max(j.num_gpus, 1))]
    res, m = run(jobs, spec, table, SimConfig(policy=row.policy, knobs=row.knobs,
                                              interval_s=row.cycle_s,
                                              checkpoint_share=row.ckpt, hsbatch_slack=row.slack,
                                              share_optin=row.share,
                                              ledger_half_life_s=row.half_life_s))
    util = "/".join(f"{t}:{u:.2f}" for t, u in m.get("util_by_type", {}).items())
    # scontrol updates the daemon made per cycle (Nice + Features): the load it puts on slurmctld
    per_cycle = m["updates"] / m["cycles"] if m.get("cycles") else 0.0
    # per account (JCT, level): who gains and who pays (frontier.py's "who pays" table)
    return {"scenario": scenario, "seed": sc["seed"], "policy": row.label, **m, "util": util,
            "upd_per_cycle": per_cycle, "by_account": account_metrics(res)}


def _speed(data: Path, n: int, gpus: int, policy: str = "fifo") -> dict[str, Any]:
    """`n` Philly jobs (tiled) on `gpus` GPUs at load 0.9, the daemon's cycle every 60 s."""
    per = gpus // 3
    spec = uniform_cluster({"k80": per, "p100": per, "v100": gpus - 2 * per})
    table = throughput_table(data)
    t0 = time.perf_counter()
    jobs = prepare_trace(TraceSetup(resolve_trace("philly", data), start=20000, tile_to=n,
                                    load=0.9, seed=0), table, spec)
    # engine.simulate keeps the ~1M long-lived objects out of garbage collection while it runs
    res, m = run(jobs, spec, table, SimConfig(policy=policy, interval_s=60.0))
    return {"policy": policy, "jobs": m["jobs"], "gpus": spec.total_gpus, "sim_wall_s": m["wall_s"],
            "daemon_stages_s": res.daemon_stages_s,
            "cycles": m["cycles"], "quiet_cycles": m["quiet_cycles"], "updates": m["updates"],
            "total_wall_s": time.perf_counter() - t0,
            "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _speed_line(sp: dict[str, Any]) -> str:
    return (f"Speed ({sp['policy']}, daemon cycle every 60 s, {sp.get('build', 'pure Python')}): "
            f"{sp['jobs']} jobs on "
            f"{sp['gpus']} GPUs simulated in {sp['sim_wall_s']:.0f} s "
            f"({sp['total_wall_s']:.0f} s with loading), {sp['cycles']} daemon cycles "
            f"({sp['quiet_cycles']} quiet: nothing changed, nothing decided), "
            f"{sp['updates']} updates, max RSS {sp['max_rss_mb']:.0f} MB "
            f"(target < 600 s, < 4096 MB){_stages_part(sp)}")


def _stages_part(sp: dict[str, Any]) -> str:
    """Where the run's wall time went: the daemon's cycle steps (CycleResult.stages), the rest
    being the simulated Slurm and the engine ("" for a run without daemon cycles)."""
    stages, wall = sp.get("daemon_stages_s") or {}, sp["sim_wall_s"]
    if not stages or wall <= 0:
        return ""
    steps = ", ".join(f"{k} {100 * v / wall:.0f}%" for k, v in stages.items())
    daemon = sum(stages.values())
    return (f"; the daemon's cycles {100 * daemon / wall:.0f}% of it ({steps}), the simulated "
            f"Slurm and the engine {100 * (wall - daemon) / wall:.0f}%")


def _speed_ratios(runs: list[dict[str, Any]]) -> list[str]:
    """Each policy's speed run against the Slurm baseline's on the same host, where both ran:
    the host sets the seconds (bench/README.md, session 26), the ratio travels."""
    base = next((sp for sp in runs if sp["policy"] == "fifo"), None)
    if base is None or base["sim_wall_s"] <= 0:
        return []
    return [f"Speed ({sp['policy']}) / Slurm baseline (fifo) on this host: "
            f"{sp['sim_wall_s'] / base['sim_wall_s']:.2f}x" for sp in runs if sp is not base]


def _speed_report(data: Path, policies: list[str], build: str) -> Iterator[str]:
    """The 100k-job speed run of each policy, a line as each ends, then the ratios to fifo;
    `build`: what ran (compiled.check)."""
    runs = []
    for pol in policies:
        runs.append({**_speed(data, 100_000, 2000, pol), "build": build})
        yield _speed_line(runs[-1])
    yield from _speed_ratios(runs)


def _fmt(row: dict[str, Any]) -> list[str]:
    out = []
    for c in COLUMNS:
        v = row.get(c, "")
        if c.endswith("_s") and isinstance(v, float):
            out.append(f"{v / 3600:.2f} h" if c != "wall_s" else f"{v:.0f} s")
        elif isinstance(v, float):
            out.append(f"{v:.3f}")
        else:
            out.append(str(v))
    return out


def _show(values: list[float], fmt: str = ".3f") -> str:
    """Per-seed values, their mean and, over two or more seeds, the mean's standard error
    (compare.mean_se): how far the mean may move with other seeds."""
    per = " / ".join(format(v, fmt) for v in values)
    stat = mean_se(values)
    se = "" if stat["se"] is None else f", SE {format(stat['se'], fmt)}"
    return f"{per} (mean {format(stat['mean'], fmt)}{se})"


def _ratios(rows: list[dict[str, Any]], scenario: str) -> list[str]:
    """Must-show ratios per seed (same run, same trace window) and their mean over seeds."""
    seeds = sorted({r["seed"] for r in rows if r["scenario"] == scenario})
    out = [f"Must-show ({scenario}; ratios from the same seed, then the mean over seeds "
           f"{', '.join(map(str, seeds))}; Gavel = its faster variant, hase = its fairer one):"]
    groups: tuple[tuple[str, Callable[[str], bool]], ...] = (
              ("fair, plain sbatch, no requeue", lambda k: k == "fair-0.2-sbatch"),
              ("fair with hsbatch, no requeue (best theta)",
               lambda k: k.startswith("fair") and "ckpt" not in k and "sbatch" not in k),
              ("fair + checkpoint/requeue, every job opts in", lambda k: k == "fair-0.2+ckpt"),
              ("fair + checkpoint/requeue, half the jobs opt in", lambda k: k == "fair-0.2+ckpt50"),
              ("fair + checkpoint/requeue, every job opts in, daemon's usage half-life 1 day",
               lambda k: k == "fair-0.2+ckpt-hl1d"),
              ("fair + checkpoint/requeue, every job opts in, idle fill 0.5",
               lambda k: k == "fair-0.2+ckpt-fill"),
              ("fair + checkpoint/requeue, every job opts in, fairness first (sfq 0, floor 0.6)",
               lambda k: k == "fair-sfq0-floor0.6+ckpt"),
              ("fair + checkpoint/requeue, every job opts in, fairness first (sfq 0, floor 0.57, "
               "yield_factor 3, rotation's gap test), daemon cycle 15 s",
               lambda k: k == FAST_ROW),
              ("the same, every 1-GPU job opted in to MPS pairing (share=yes, share_gain 1.5)",
               lambda k: k == SHARE_ROW))
    for title, pick in groups:
        vals: dict[str, list[float]] = {"base": [], "gavel": [], "rho": [], "grho": [],
                                        "jain": [], "hjain": [], "jain1d": [], "hjain1d": []}
        names = []
        for seed in seeds:
            by = {r["policy"]: r for r in rows if r["scenario"] == scenario and r["seed"] == seed}
            cands = [r for k, r in by.items() if pick(k)]
            if not cands or "slurm-fifo" not in by:
                continue
            fair = min(cands, key=lambda r: r["avg_jct_s"])
            # the stronger variant of each competitor (plain sbatch or with hsbatch)
            gavel = min((by[k] for k in ("gavel", "gavel-hsbatch") if k in by),
                        key=lambda r: r["avg_jct_s"])
            hase_jain = max(by[k]["jain_accounts"] for k in ("hase", "hase-hsbatch") if k in by)
            hase_jain_1d = max(by[k]["jain_accounts_1d"] for k in ("hase", "hase-hsbatch")
                               if k in by)
            names.append(fair["policy"])
            vals["base"].append(fair["avg_jct_s"] / by["slurm-fifo"]["avg_jct_s"])
            vals["gavel"].append(fair["avg_jct_s"] / gavel["avg_jct_s"])
            vals["rho"].append(fair["rho_p99"])
            vals["grho"].append(gavel["rho_p99"])
            vals["jain"].append(fair["jain_accounts"])
            vals["hjain"].append(hase_jain)
            vals["jain1d"].append(fair["jain_accounts_1d"])
            vals["hjain1d"].append(hase_jain_1d)
        if not names:
            continue

        out += [f"- {title} [{', '.join(names)}]:",
                f"  - avg JCT / Slurm baseline: {_show(vals['base'])} (target <= 0.5)",
                f"  - avg JCT / Gavel: {_show(vals['gavel'])} (target <= 0.9)",
                f"  - p99 rho: {_show(vals['rho'], '.2f')} vs Gavel {_show(vals['grho'], '.2f')} "
                "(target: no higher than Gavel)",
                f"  - Jain over accounts: {_show(vals['jain'])} (target >= 0.95); "
                f"hase {_show(vals['hjain'])}",
                f"  - (not a target) Jain per day, fairness counted over 1-day windows: "
                f"{_show(vals['jain1d'])}; hase {_show(vals['hjain1d'])}"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out")
    ap.add_argument("--jobs", type=int, default=1000, help="Philly jobs per run")
    ap.add_argument("--load", type=float, default=1.2, help="offered load (v100 runtimes)")
    ap.add_argument("--gpus-per-type", type=int, default=32)
    ap.add_argument("--seeds", default="0,1,2",
                    help="comma-separated seeds (arrival jitter); every policy runs on each")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--speed", action="store_true", help="also 100k jobs on 2,000 GPUs")
    ap.add_argument("--speed-only", action="store_true",
                    help="only the 100k-job speed run (no policy table, nothing written)")
    ap.add_argument("--speed-policy", action="append", choices=["fifo", "fair", "hase", "gavel"],
                    help="policies of the --speed run (default: fifo; repeatable)")
    ap.add_argument("--compiled", action="store_true",
                    help="run on the mypyc-compiled build of the policies, the daemon's cycle and "
                         "the simulated scheduler (bench/compiled.py; built first, about 40 s, "
                         "when missing or made from other sources)")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--scenario", action="append",
                    choices=["philly-3type", "gavel-msr", "alibaba-mps",
                             "philly-a100-v100-t4", "alibaba-p100-t4-v100"],
                    help="scenarios to run (default: philly-3type; gavel-msr takes ~1 min per "
                         "seed, alibaba-mps ~1.5 min: 2,000 Alibaba 2023 pods, 40%% of them "
                         "asking for a fraction of a GPU, so MPS sharing is in play; "
                         "philly-a100-v100-t4 and alibaba-p100-t4-v100: the same traces on "
                         "fleets with types Gavel did not measure, at predicted speeds)")
    ap.add_argument("--split-gpus", action="store_true",
                    help="ablation: every g-GPU job becomes g 1-GPU jobs (same account, arrival, "
                         "duration and GPU-hours), to see what multi-GPU jobs cost fairness")
    a = ap.parse_args()
    if a.compiled and not os.environ.get("HASE_BENCH_BUILD"):
        compiled.main()
        env = {**os.environ, "HASE_BENCH_BUILD": str(compiled.BUILD)}
        # the data directory as resolved here (the build's own default would be beside it)
        os.execve(sys.executable, [sys.executable, *sys.argv, "--data-dir", str(a.data_dir)], env)
    build = compiled.check()  # "pure Python" or the compiled build (StaleBuild: a stale one)
    print(f"slurm_hase: {build}", file=sys.stderr, flush=True)
    g = a.gpus_per_type
    scenarios = {
        "philly-3type": {"trace": "philly", "start": 20000, "count": a.jobs, "load": a.load,
                         "gpus": {"k80": g, "p100": g, "v100": g}},
        "gavel-msr": {"trace": "gavel", "start": 0, "count": None, "load": a.load,
                      "gpus": {"k80": g, "p100": g, "v100": g}},
        # the first 2,000 pods; the 367 whose gpu_spec names only types this cluster lacks (T4
        # for most) are refused at submission, as sbatch would refuse them
        "alibaba-mps": {"trace": "alibaba", "start": 0, "count": 2000, "load": a.load,
                        "gpus": {"k80": g, "p100": g, "v100": g}},
        # A100s beside V100s beside T4s; a100 and t4 at the shipped model's predicted speeds
        "philly-a100-v100-t4": {"trace": "philly", "start": 20000, "count": a.jobs,
                                "load": a.load, "gpus": {"a100": g, "v100": g, "t4": g},
                                "predicted": True,
                                "billing": {"t4": 1.0, "v100": 2.0, "a100": 4.0}},
        # the Alibaba pods on the GPU types of Alibaba's own fleet (its T4 pods run here)
        "alibaba-p100-t4-v100": {"trace": "alibaba", "start": 0, "count": 2000, "load": a.load,
                                 "gpus": {"p100": g, "t4": g, "v100": g}, "predicted": True,
                                 "billing": {"t4": 1.0, "p100": 2.0, "v100": 4.0}},
    }
    if a.speed_only:
        for line in _speed_report(a.data_dir, a.speed_policy or ["fifo"], build):
            print(line, flush=True)
        return 0
    chosen = a.scenario or ["philly-3type"]
    scenarios = {k: v for k, v in scenarios.items() if k in chosen}
    seeds = [int(x) for x in a.seeds.split(",") if x.strip()]
    tasks: list[Task] = [
        (name, {**sc, "seed": seed, "data": str(a.data_dir), "split_gpus": a.split_gpus}, row)
        for name, sc in scenarios.items() for seed in seeds for row in POLICIES]
    with ProcessPoolExecutor(max_workers=a.workers) as pool:
        rows = []
        for row in pool.map(_one, tasks):
            print(f"done {row['scenario']} seed {row['seed']} {row['policy']} "
                  f"({row['wall_s']:.0f} s)", file=sys.stderr, flush=True)
            rows.append(row)
    a.out.mkdir(parents=True, exist_ok=True)
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(_fmt(r)) + " |" for r in rows]
    lines.append("")
    for name in scenarios:
        lines += _ratios(rows, name) + [""]
    if a.speed:
        lines += _speed_report(a.data_dir, a.speed_policy or ["fifo"], build)
    text = "\n".join(lines) + "\n"
    (a.out / "policies.md").write_text(text)
    (a.out / "policies.json").write_text(json.dumps(rows, indent=2, sort_keys=True) + "\n")
    with (a.out / "policies.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    if not a.no_plot:
        from slurm_hase.sim.plots import plot_bench

        first = seeds[0]
        for name in scenarios:  # policies.png for the Philly bench, policies-<name>.png else
            png = "policies.png" if name == "philly-3type" else f"policies-{name}.png"
            plot_bench([r for r in rows if r["scenario"] == name and r["seed"] == first],
                       a.out / png, f"{name}, seed {first}")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
