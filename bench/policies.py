"""Policy benchmark: every policy on the same real traces and loads; one table, one plot.

    .venv/bin/python bench/policies.py                 # Philly scenario, all policies (~2 min)
    .venv/bin/python bench/policies.py --scenario philly-3type --scenario gavel-msr
    .venv/bin/python bench/policies.py --speed         # + 100,000 jobs on 2,000 GPUs (fifo)
    .venv/bin/python bench/policies.py --jobs 2000     # bigger window (~10 min)

Writes bench/out/policies.md (table + must-show ratios), policies.csv, policies.json and
policies.png. Needs ../shared/data (Philly/Alibaba may not be copied into the repo).
"""

from __future__ import annotations

import argparse
import csv
import json
import resource
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from slurm_hase.sim.cluster import uniform_cluster  # noqa: E402
from slurm_hase.sim.engine import SimConfig  # noqa: E402
from slurm_hase.sim.report import (  # noqa: E402
    DEFAULT_DATA,
    TraceSetup,
    prepare_trace,
    resolve_trace,
    run,
    throughput_table,
)

# (label, policy, knobs, billing weights)
POLICIES: list[tuple[str, str, dict[str, float], dict[str, float]]] = [
    ("slurm-fifo", "fifo", {}, {}),
    ("slurm-billing", "fifo", {}, {"k80": 1.0, "p100": 2.0, "v100": 4.0}),
    ("gavel", "gavel", {}, {}),
    ("hase", "hase", {}, {}),
    ("fair-0.0", "fair", {"theta": 0.0}, {}),
    ("fair-0.2", "fair", {"theta": 0.2}, {}),
    ("fair-0.5", "fair", {"theta": 0.5}, {}),
]
COLUMNS = ["scenario", "policy", "jobs", "avg_jct_s", "p99_jct_s", "avg_wait_s", "makespan_s",
           "rho_p99", "rho_max", "rho_gt1_share", "jain_accounts", "util", "wall_s"]


def _one(args: tuple[str, dict[str, Any], str, str, dict[str, float], dict[str, float]]) -> dict[str, Any]:
    scenario, sc, label, policy, knobs, billing = args
    spec = uniform_cluster(sc["gpus"], billing=billing)
    table = throughput_table(Path(sc["data"]))
    setup = TraceSetup(resolve_trace(sc["trace"], Path(sc["data"])), start=sc["start"],
                       count=sc["count"], load=sc["load"], seed=sc["seed"])
    jobs = prepare_trace(setup, table, spec)
    _, m = run(jobs, spec, table, SimConfig(policy=policy, knobs=knobs, interval_s=60.0))
    util = "/".join(f"{t}:{u:.2f}" for t, u in m.get("util_by_type", {}).items())
    return {"scenario": scenario, "policy": label, **m, "util": util}


def _speed(data: Path, n: int, gpus: int) -> dict[str, Any]:
    per = gpus // 3
    spec = uniform_cluster({"k80": per, "p100": per, "v100": gpus - 2 * per})
    table = throughput_table(data)
    t0 = time.perf_counter()
    jobs = prepare_trace(TraceSetup(resolve_trace("philly", data), start=20000, tile_to=n,
                                    load=0.9, seed=0), table, spec)
    _, m = run(jobs, spec, table, SimConfig(policy="fifo", interval_s=300.0))
    return {"jobs": m["jobs"], "gpus": spec.total_gpus, "sim_wall_s": m["wall_s"],
            "total_wall_s": time.perf_counter() - t0,
            "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


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


def _ratios(rows: list[dict[str, Any]], scenario: str) -> list[str]:
    by = {r["policy"]: r for r in rows if r["scenario"] == scenario}
    fair = min((r for k, r in by.items() if k.startswith("fair")), key=lambda r: r["avg_jct_s"])
    base, gavel, hase = by["slurm-fifo"], by["gavel"], by["hase"]
    lines = [f"Must-show ({scenario}, best fair knob = {fair['policy']}):",
             f"- fair avg JCT / Slurm baseline = {fair['avg_jct_s'] / base['avg_jct_s']:.3f} (target <= 0.5)",
             f"- fair avg JCT / Gavel = {fair['avg_jct_s'] / gavel['avg_jct_s']:.3f} (target <= 0.9)",
             f"- p99 rho: fair {fair['rho_p99']:.2f} vs Gavel {gavel['rho_p99']:.2f} (target: fair <= Gavel)",
             f"- Jain: fair {fair['jain_accounts']:.3f} (target >= 0.95), hase {hase['jain_accounts']:.3f}"]
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out")
    ap.add_argument("--jobs", type=int, default=1000, help="Philly jobs per run")
    ap.add_argument("--load", type=float, default=1.2, help="offered load (v100 runtimes)")
    ap.add_argument("--gpus-per-type", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--speed", action="store_true", help="also 100k jobs on 2,000 GPUs")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--scenario", action="append", choices=["philly-3type", "gavel-msr"],
                    help="scenarios to run (default: philly-3type; gavel-msr is slow, > 15 min)")
    a = ap.parse_args()
    g = a.gpus_per_type
    scenarios = {
        "philly-3type": {"trace": "philly", "start": 20000, "count": a.jobs, "load": a.load,
                         "gpus": {"k80": g, "p100": g, "v100": g}},
        "gavel-msr": {"trace": "gavel", "start": 0, "count": None, "load": a.load,
                      "gpus": {"k80": g, "p100": g, "v100": g}},
    }
    chosen = a.scenario or ["philly-3type"]
    scenarios = {k: v for k, v in scenarios.items() if k in chosen}
    tasks = [(name, {**sc, "seed": a.seed, "data": str(a.data_dir)}, label, pol, knobs, bill)
             for name, sc in scenarios.items() for label, pol, knobs, bill in POLICIES]
    with ProcessPoolExecutor(max_workers=a.workers) as pool:
        rows = []
        for row in pool.map(_one, tasks):
            print(f"done {row['scenario']} {row['policy']} ({row['wall_s']:.0f} s)", file=sys.stderr, flush=True)
            rows.append(row)
    a.out.mkdir(parents=True, exist_ok=True)
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(_fmt(r)) + " |" for r in rows]
    lines.append("")
    for name in scenarios:
        lines += _ratios(rows, name) + [""]
    if a.speed:
        sp = _speed(a.data_dir, 100_000, 2000)
        lines.append(f"Speed: {sp['jobs']} jobs on {sp['gpus']} GPUs simulated in "
                     f"{sp['sim_wall_s']:.0f} s ({sp['total_wall_s']:.0f} s with loading), "
                     f"max RSS {sp['max_rss_mb']:.0f} MB (target < 600 s, < 4096 MB)")
    text = "\n".join(lines) + "\n"
    (a.out / "policies.md").write_text(text)
    (a.out / "policies.json").write_text(json.dumps(rows, indent=2, sort_keys=True) + "\n")
    with (a.out / "policies.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    if not a.no_plot:
        from slurm_hase.sim.plots import plot_bench

        plot_bench([r for r in rows if r["scenario"] == "philly-3type"], a.out / "policies.png")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
