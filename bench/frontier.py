"""The JCT / fairness frontier: what each point of Jain's index costs in average JCT.

    .venv/bin/python bench/frontier.py                      # seeds 0,1,2 (~1 min on 2 cores)
    .venv/bin/python bench/frontier.py --seeds 3,4,5,6,7    # out-of-sample seeds
    .venv/bin/python bench/frontier.py --trace site.csv --start 0 --jobs 2000   # your own trace

Runs, on policies.py's Philly scenario by default (1,000 jobs, load 1.2, 32 K80 + 32 P100 + 32 V100,
hsbatch slack 1 where fair/hase/gavel-hsbatch say so), the competitors (Slurm fifo, Gavel,
HASE) and `fair` + checkpoint/requeue (every job opts in) at the default setting (SFQ between
accounts) and with one shortest-first order over all accounts (`sfq` 0) at a sweep of `floor`
values: the knob an admin turns to buy fairness with JCT (docs/daemon.md items 9-10), and
policies.py's closest point to the target (floor 0.57, `yield_factor` 3, rotation's gap test,
the daemon's cycle every 15 s), without and with MPS pairing (every 1-GPU job opted in,
`share_gain` 1.5: policy/pairing.py).

Prints one table (mean over seeds of avg JCT / the same seed's Slurm fifo, Jain over accounts,
p99 rho; a setting that meets issue #4's JCT <= 0.5x and Jain >= 0.95 together is marked), then
who pays for fairness (the first floor of the sweep against the first one that reaches Jain
0.95, or the last: each account's JCT and contended level in both, and the hours it adds to the
average JCT), and writes bench/out/frontier.md and frontier.png (JCT ratio against Jain, target
corner shaded).
Needs ../shared/data (the Philly trace).
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

from policies import FAST_ROW, POLICIES, SHARE_ROW, SLACK, WEEK, Row, Task, _one  # noqa: E402

from slurm_hase.sim.compare import account_comparison, mean_se  # noqa: E402
from slurm_hase.sim.report import DEFAULT_DATA, TRACE_ALIASES  # noqa: E402

FLOORS = (0.0, 0.3, 0.4, 0.5, 0.55, 0.6, 0.65, 0.7)
JCT_TARGET, JAIN_TARGET = 0.5, 0.95


def settings(floors: tuple[float, ...] = FLOORS) -> list[Row]:
    """Competitors and fair's default (policies.py's rows), the sfq 0 floor sweep, and
    policies.py's closest point to the target (daemon cycle 15 s, `narrow`, yield_factor 3),
    without and with MPS pairing (session 46)."""
    rows = {p.label: p for p in POLICIES}
    out = [rows[k] for k in ("slurm-fifo", "gavel", "gavel-hsbatch", "hase", "hase-hsbatch")]
    out.append(rows["fair-0.2+ckpt"]._replace(label="fair-0.2+ckpt (SFQ)"))
    out += [Row(f"fair-sfq0-floor{f:g}+ckpt", "fair", {"theta": 0.2, "sfq": 0.0, "floor": f}, {},
                1.0, SLACK, WEEK) for f in floors]
    out += [rows[FAST_ROW], rows[SHARE_ROW]]
    return out


def in_sweep(label: str) -> bool:
    """Whether a setting is one point of the sfq 0 floor sweep."""
    return label.startswith("fair-sfq0-floor") and label.endswith("+ckpt")


def summarise(rows: list[dict[str, Any]], order: list[str]) -> list[dict[str, Any]]:
    """Per setting: mean over seeds of JCT / the same seed's fifo JCT, Jain and p99 rho."""
    base = {r["seed"]: r["avg_jct_s"] for r in rows if r["policy"] == "slurm-fifo"}
    out = []
    for label in order:
        mine = sorted((r for r in rows if r["policy"] == label), key=lambda r: r["seed"])
        ratios = [r["avg_jct_s"] / base[r["seed"]] for r in mine if r["seed"] in base]
        if not ratios:
            continue
        jain = [r["jain_accounts"] for r in mine]
        jct_stat, jain_stat = mean_se(ratios), mean_se(jain)
        out.append({"setting": label, "jct_ratio": jct_stat["mean"], "jct_se": jct_stat["se"],
                    "jct_per_seed": ratios, "jain": jain_stat["mean"], "jain_se": jain_stat["se"],
                    "jain_per_seed": jain,
                    "jain_1d": sum(r["jain_accounts_1d"] for r in mine) / len(mine),
                    "rho_p99": sum(r["rho_p99"] for r in mine) / len(mine)})
    return out


def _se(se: float | None) -> str:
    """' SE x' after a mean over two or more seeds, '' for one seed."""
    return "" if se is None else f" SE {se:.3f}"


def table(summary: list[dict[str, Any]], seeds: list[int]) -> str:
    """Markdown table of summarise()'s rows."""
    lines = [f"JCT / Slurm fifo and Jain over accounts, mean of seeds {', '.join(map(str, seeds))} "
             f"(its standard error after SE, per seed in brackets); * = JCT <= {JCT_TARGET}x and "
             f"Jain >= {JAIN_TARGET} together (at the mean)",
             "", "| setting | JCT / Slurm | Jain | Jain per day (not a target) | p99 rho "
             "| both targets |", "|---|---|---|---|---|---|"]
    for s in summary:
        both = s["jct_ratio"] <= JCT_TARGET and s["jain"] >= JAIN_TARGET
        lines.append(f"| {s['setting']} | {s['jct_ratio']:.3f}{_se(s['jct_se'])} "
                     f"({'/'.join(f'{v:.3f}' for v in s['jct_per_seed'])}) | {s['jain']:.3f}"
                     f"{_se(s['jain_se'])} "
                     f"({'/'.join(f'{v:.3f}' for v in s['jain_per_seed'])}) | {s['jain_1d']:.3f} "
                     f"| {s['rho_p99']:.2f} "
                     f"| {'*' if both else ''} |")
    return "\n".join(lines) + "\n"


def who_pays(rows: list[dict[str, Any]], cheap: str, fair: str) -> str:
    """Which accounts pay for the fairness `fair` buys over `cheap` (both in `rows`): per account,
    the mean over seeds of its average JCT and contended level in each, and the hours it adds
    to the overall average JCT (the additions sum to the change of the average)."""
    per_seed = []
    for seed in sorted({r["seed"] for r in rows}):
        runs = {r["policy"]: r for r in rows if r["seed"] == seed and r["policy"] in (cheap, fair)}
        if len(runs) == 2:
            per_seed.append(account_comparison([cheap, fair], runs))
    if not per_seed:
        return ""
    lines = [f"Who pays for fairness: {fair} against {cheap} (mean of {len(per_seed)} seeds; "
             "level = service / entitlement while contended; adds = hours the account adds to "
             "the average JCT)", "", "| account | jobs | JCT h before | JCT h after | level before "
             "| level after | adds h |", "|---|---|---|---|---|---|---|"]

    def mean(acct: str, pol: str, key: str, unit: float = 1.0) -> float | None:
        vals = [s[acct][pol][key] for s in per_seed if acct in s and s[acct][pol][key] is not None]
        return sum(vals) / len(vals) / unit if vals else None

    def fmt(v: float | None, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    total = 0.0
    for acct in per_seed[0]:
        adds = mean(acct, fair, "adds_to_avg_jct_s", 3600.0)
        total += adds or 0.0
        lines.append(f"| {acct} | {per_seed[0][acct]['jobs']:.0f} "
                     f"| {fmt(mean(acct, cheap, 'avg_jct_s', 3600.0), '.2f')} "
                     f"| {fmt(mean(acct, fair, 'avg_jct_s', 3600.0), '.2f')} "
                     f"| {fmt(mean(acct, cheap, 'mean_level'), '.3f')} "
                     f"| {fmt(mean(acct, fair, 'mean_level'), '.3f')} | {fmt(adds, '+.3f')} |")
    lines.append(f"| all | | | | | | {total:+.3f} |")
    return "\n".join(lines) + "\n"


def plot(summary: list[dict[str, Any]], path: Path, title: str) -> Path:
    """JCT ratio against Jain; the sfq 0 floor sweep as a line, the other settings with +- one
    standard error over seeds as bars, the target corner shaded."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("the plot needs matplotlib: pip install matplotlib (or pass --no-plot)") from None
    fig, ax = plt.subplots(figsize=(7, 5))
    sweep = [s for s in summary if in_sweep(s["setting"])]
    ax.plot([s["jain"] for s in sweep], [s["jct_ratio"] for s in sweep], "o-", label="fair, sfq 0, floor sweep")
    for i, s in enumerate(sweep):
        ax.annotate(s["setting"].split("floor")[1].split("+")[0], (s["jain"], s["jct_ratio"]),
                    textcoords="offset points", xytext=(4, 4 if i % 2 else -10), fontsize=8)
    for s in summary:
        if not in_sweep(s["setting"]):
            # bars: +- one standard error of the mean over seeds (none for a single seed)
            ax.errorbar(s["jain"], s["jct_ratio"], xerr=s["jain_se"], yerr=s["jct_se"], fmt="s",
                        capsize=3, label=s["setting"])
    lo, hi = ax.get_ylim()
    ax.fill_between([JAIN_TARGET, 1.0], lo, JCT_TARGET, color="green", alpha=0.12,
                    label=f"target: JCT <= {JCT_TARGET}x, Jain >= {JAIN_TARGET}")
    ax.set_ylim(lo, hi)
    ax.set_xlabel("Jain's index over accounts (contended samples)")
    ax.set_ylabel("avg JCT / Slurm fifo")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="upper right")  # the competitors sit upper left
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out")
    ap.add_argument("--trace", default="philly",
                    help="philly/gavel/alibaba (in --data-dir) or a trace file of your own site")
    ap.add_argument("--start", type=int, default=20000, help="first job of the window")
    ap.add_argument("--jobs", type=int, default=1000, help="jobs in the window")
    ap.add_argument("--load", type=float, default=1.2, help="offered load (v100 runtimes)")
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (arrival jitter)")
    ap.add_argument("--floors", default=",".join(f"{f:g}" for f in FLOORS),
                    help="floor values of the sfq 0 sweep")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--no-plot", action="store_true")
    a = ap.parse_args()
    if a.trace not in TRACE_ALIASES and not Path(a.trace).is_file():
        print(f"error: --trace {a.trace}: no such file (or one of {', '.join(TRACE_ALIASES)})",
              file=sys.stderr)
        return 2
    trace = a.data_dir / TRACE_ALIASES[a.trace] if a.trace in TRACE_ALIASES else Path(a.trace)
    if not trace.is_file():  # a named trace of ../shared/data; the throughputs are bundled
        print(f"skipped: needs {trace} (../shared/data; not in a plain clone: give --trace "
              "a trace file of your own)", file=sys.stderr)
        return 0
    seeds = [int(x) for x in a.seeds.split(",") if x.strip()]
    chosen = settings(tuple(float(x) for x in a.floors.split(",") if x.strip()))
    scenario = {"trace": a.trace, "start": a.start, "count": a.jobs, "load": a.load,
                "gpus": {"k80": 32, "p100": 32, "v100": 32}, "data": str(a.data_dir)}
    tasks: list[Task] = [("philly-3type", {**scenario, "seed": seed}, row)
                         for seed in seeds for row in chosen]
    with ProcessPoolExecutor(max_workers=a.workers) as pool:
        rows = []
        for row in pool.map(_one, tasks):
            print(f"done seed {row['seed']} {row['policy']} ({row['wall_s']:.0f} s)", file=sys.stderr, flush=True)
            rows.append(row)
    summary = summarise(rows, [s.label for s in chosen])
    text = table(summary, seeds)
    floors = [s.label for s in chosen if in_sweep(s.label)]
    # the cheapest setting (no floor) against the fairest one that meets Jain's target, or
    # the last floor of the sweep
    fairest = next((s["setting"] for s in summary if in_sweep(s["setting"])
                    and s["setting"] != floors[0] and s["jain"] >= JAIN_TARGET), floors[-1]
                   ) if floors else None
    if fairest is not None and fairest != floors[0]:
        text += "\n" + who_pays(rows, floors[0], fairest)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "frontier.md").write_text(text)
    if not a.no_plot:
        plot(summary, a.out / "frontier.png",
             f"{a.trace}, {a.jobs} jobs from {a.start}, 96 GPUs (3 types), load {a.load:g}")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
