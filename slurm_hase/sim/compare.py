"""Several policies' runs on the same jobs, side by side (`hase simulate --policy A --policy B`)."""

from __future__ import annotations

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
                                    for p in policies}}


def comparison_table(policies: Sequence[str], metrics: Mapping[str, Mapping[str, Any]]) -> str:
    """One row per policy (the COMPARED metrics) and the JCT ratio to the first."""
    ratios = comparison(policies, metrics)["avg_jct_vs_baseline"]
    header = ["policy", *[label for _, label, _ in COMPARED], f"JCT / {policies[0]}"]
    rows = [[p, *[f"{metrics[p].get(key, 0.0) / unit:.{3 if unit == 1.0 else 2}f}"
                  for key, _, unit in COMPARED],
             "-" if ratios[p] is None else f"{ratios[p]:.3f}"] for p in policies]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in
                       enumerate(zip(r, widths, strict=True))) for r in [header, *rows]]
    return "\n".join(["", *lines])
