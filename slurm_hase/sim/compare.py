"""Several policies' runs on the same jobs, side by side (`hase simulate --policy A --policy B`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

COMPARED = [("avg_jct_s", "avg JCT h", 3600.0), ("p99_jct_s", "p99 JCT h", 3600.0),
            ("avg_wait_s", "wait h", 3600.0), ("rho_p99", "p99 rho", 1.0),
            ("jain_accounts", "Jain", 1.0), ("jain_accounts_1d", "Jain/day", 1.0)]


def comparison(policies: Sequence[str], metrics: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The runs side by side: each policy's metrics and its average JCT / the first policy's."""
    base = metrics[policies[0]].get("avg_jct_s") or 0.0
    return {"policies": list(policies), "baseline": policies[0],
            "metrics": {p: metrics[p] for p in policies},
            "avg_jct_vs_baseline": {p: (metrics[p].get("avg_jct_s", 0.0) / base if base else None)
                                    for p in policies},
            "accounts": account_comparison(policies, metrics)}


def account_comparison(policies: Sequence[str], metrics: Mapping[str, Mapping[str, Any]]
                       ) -> dict[str, dict[str, Any]]:
    """Who gains and who pays: per account (most jobs in the first policy's run first), each
    policy's average JCT and mean level (metrics' `by_account`), and for every policy its
    average JCT / the first policy's and the seconds the account adds to the overall average
    JCT (jobs x JCT change / all jobs: when every job finished in both runs, the additions
    sum to the change of the average; an account whose finished jobs differ gets None).
    Empty when a run has no `by_account`."""
    runs = {p: metrics[p].get("by_account") for p in policies}
    first = runs[policies[0]]
    if first is None or any(r is None for r in runs.values()):
        return {}
    n_all = sum(a["jobs"] for a in first.values()) or 1.0
    out: dict[str, dict[str, Any]] = {}
    for acct in sorted(first, key=lambda a: (-first[a]["jobs"], a)):
        base = first[acct].get("avg_jct_s")
        row: dict[str, Any] = {"jobs": first[acct]["jobs"]}
        for p in policies:
            mine = (runs[p] or {}).get(acct, {})
            jct = mine.get("avg_jct_s")
            same = jct is not None and base is not None and mine.get("jobs") == first[acct]["jobs"]
            row[p] = {"avg_jct_s": jct, "mean_level": mine.get("mean_level"),
                      "jct_vs_baseline": jct / base if same and base else None,
                      "adds_to_avg_jct_s": (jct - base) * first[acct]["jobs"] / n_all
                      if same else None}
        out[acct] = row
    return out


def account_table(policies: Sequence[str], metrics: Mapping[str, Mapping[str, Any]],
                  limit: int = 10) -> str:
    """account_comparison as text: the `limit` accounts with most jobs (their JCT per policy,
    level per policy, hours added per policy after the first), then the sums ("" when there is
    nothing to compare; the JCT ratios are in the JSON)."""
    accounts = account_comparison(policies, metrics)
    if not accounts:
        return ""
    others = policies[1:]
    header = ["account", "jobs", *[f"{p} JCT h" for p in policies],
              *[f"{p} level" for p in policies], *[f"{p} adds h" for p in others]]

    def fmt(v: float | None, spec: str, unit: float = 1.0) -> str:
        return "-" if v is None else format(v / unit, spec)

    rows = []
    for acct, row in list(accounts.items())[:limit]:
        rows.append([acct, f"{row['jobs']:.0f}",
                     *[fmt(row[p]["avg_jct_s"], ".2f", 3600.0) for p in policies],
                     *[fmt(row[p]["mean_level"], ".3f") for p in policies],
                     *[fmt(row[p]["adds_to_avg_jct_s"], "+.3f", 3600.0) for p in others]])
    total_adds = {p: sum(r[p]["adds_to_avg_jct_s"] or 0.0 for r in accounts.values())
                  for p in others}
    rows.append([f"all {len(accounts)}", f"{sum(r['jobs'] for r in accounts.values()):.0f}",
                 *[fmt(metrics[p].get("avg_jct_s", 0.0), ".2f", 3600.0) for p in policies],
                 *["" for _ in policies],
                 *[fmt(total_adds[p], "+.3f", 3600.0) for p in others]])
    lines = _aligned(header, rows)
    more = len(accounts) - limit
    note = [f"({more} more accounts: --json has every one)"] if more > 0 else []
    return "\n".join(["", "By account (level = service / entitlement while contended; "
                       "adds = hours the account adds to the average JCT):", *lines, *note])


def comparison_table(policies: Sequence[str], metrics: Mapping[str, Mapping[str, Any]]) -> str:
    """One row per policy (the COMPARED metrics) and the JCT ratio to the first."""
    ratios = comparison(policies, metrics)["avg_jct_vs_baseline"]
    header = ["policy", *[label for _, label, _ in COMPARED], f"JCT / {policies[0]}"]
    def cell(value: float | None, unit: float) -> str:  # None: a Jain never contended
        return "n/a" if value is None else f"{value / unit:.{3 if unit == 1.0 else 2}f}"

    rows = [[p, *[cell(metrics[p].get(key, 0.0), unit) for key, _, unit in COMPARED],
             "-" if ratios[p] is None else f"{ratios[p]:.3f}"] for p in policies]
    return "\n".join(["", *_aligned(header, rows)])


def mean_se(values: Sequence[float]) -> dict[str, Any]:
    """Mean of `values` and its standard error (sample standard deviation / sqrt(n); None for
    fewer than two values): how far the mean may move with other seeds."""
    n = len(values)
    mean = sum(values) / n if n else None
    se = None
    if n >= 2 and mean is not None:
        se = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)
    return {"mean": mean, "se": se, "n": n, "values": list(values)}


def over_seeds(policies: Sequence[str], runs: Mapping[int, Mapping[str, Mapping[str, Any]]]
               ) -> dict[str, Any]:
    """Several draws of the same trace (`runs`: seed -> policy -> metrics): per policy, the mean
    and standard error over seeds of each COMPARED metric and of its average JCT / the first
    policy's on the same seed (paired: the draw's luck cancels out of the ratio)."""
    seeds = sorted(runs)
    first = policies[0]
    out: dict[str, Any] = {"seeds": seeds, "baseline": first, "policies": {}}
    for p in policies:
        entry = {key: mean_se([float(runs[s][p][key]) for s in seeds
                               if runs[s][p].get(key) is not None])
                 for key, _, _ in COMPARED}
        entry["avg_jct_vs_baseline"] = mean_se([
            runs[s][p]["avg_jct_s"] / runs[s][first]["avg_jct_s"] for s in seeds
            if runs[s][p].get("avg_jct_s") is not None and runs[s][first].get("avg_jct_s")])
        out["policies"][p] = entry
    return out


def seeds_table(summary: Mapping[str, Any]) -> str:
    """over_seeds as text: one row per policy, each metric as mean +- standard error."""
    policies = list(summary["policies"])
    keys = [*COMPARED, ("avg_jct_vs_baseline", f"JCT / {summary['baseline']}", 1.0)]

    def cell(stat: Mapping[str, Any], unit: float) -> str:
        if stat["mean"] is None:
            return "-"
        digits = 3 if unit == 1.0 else 2
        se = "" if stat["se"] is None else f" +- {stat['se'] / unit:.{digits}f}"
        return f"{stat['mean'] / unit:.{digits}f}{se}"

    rows = [[p, *[cell(summary["policies"][p][key], unit) for key, _, unit in keys]]
            for p in policies]
    seeds = summary["seeds"]
    return "\n".join(["", f"Over {len(seeds)} seeds ({', '.join(map(str, seeds))}): mean +- "
                       "standard error; JCT / the first policy on the same seed, then averaged:",
                       *_aligned(["policy", *[label for _, label, _ in keys]], rows)])


def _aligned(header: list[str], rows: list[list[str]]) -> list[str]:
    """Text table lines: the first column left-aligned, the others right-aligned."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in
                      enumerate(zip(r, widths, strict=True))) for r in [header, *rows]]
