"""Which GPU types a simulated job may use (its Features and pinned type against the cluster's
nodes), and why a job can never start on a cluster: sbatch refuses such a job at submission."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from slurm_hase.policy.common import parse_features
from slurm_hase.sim.cluster import ClusterSpec

# Why a job can never start on a cluster (refusal); sbatch refuses such a job at submission.
REFUSED_TYPES = "ask only for GPU types the cluster does not have"
REFUSED_SPEED = "have no measured speed for their workload on the GPU types they may use"
REFUSED_SIZE = "need more GPUs than the cluster has of any GPU type they may use"


def feature_map(spec: ClusterSpec) -> dict[str, set[str]]:
    """Node feature -> the GPU types of the nodes that carry it."""
    out: dict[str, set[str]] = {}
    for n in spec.nodes:
        for f in n.features:
            out.setdefault(f, set()).add(n.gpu_type)
    return out


def types_allowed(features: str, pinned: str | None, feature_types: Mapping[str, set[str]],
                  type_order: Sequence[str]) -> tuple[str, ...]:
    """The types of `type_order` whose nodes satisfy a Features OR-list and a pinned type."""
    terms = parse_features(features)
    ok: set[str] = set(type_order)
    if terms:
        ok = set().union(*(feature_types.get(t, set()) for t in terms))
    if pinned:
        ok &= {pinned}
    return tuple(t for t in type_order if t in ok)


def refusal(allowed: Sequence[str], runtime: Mapping[str, float], totals: Mapping[str, int],
            need: int) -> str | None:
    """Why a job that may use `allowed` types can never start (a REFUSED_* reason), None if it
    can: some allowed type has a measured runtime and at least `need` GPUs in all."""
    if not allowed:
        return REFUSED_TYPES
    measured = [t for t in allowed if math.isfinite(runtime[t])]
    if not measured:
        return REFUSED_SPEED
    return None if any(totals[t] >= need for t in measured) else REFUSED_SIZE
