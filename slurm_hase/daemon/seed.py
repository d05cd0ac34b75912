"""Past GPU service from sacct, added to the daemon's usage ledger (loop.py seeds it at start,
and again once sacct answers after a start without it)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from slurm_hase.policy.usage import UsageLedger
from slurm_hase.predict.mig import gpu_share
from slurm_hase.slurm.tres import mps_from_tres
from slurm_hase.slurm.types import AccountingRecord


def add_service(ledger: UsageLedger, records: Iterable[AccountingRecord], until: float,
                node_mps: Mapping[str, int] | None = None) -> int:
    """Add each record's GPU service before `until` (GPUs, MPS shares as fractions: gres/mps
    over the MPS units per GPU of its node, `node_mps`, else 100; a MIG instance as its part
    of its GPU, 1/7 for a100_1g.5gb); returns how many counted."""
    added = 0
    for rec in records:
        mps = mps_from_tres(rec.alloc_tres)
        per_gpu = (node_mps or {}).get(rec.nodes, 100) if mps else 100
        gpus = sum(n * gpu_share(t) for t, n in rec.alloc_gpus.items()) + mps / per_gpu
        if rec.start_time is None or gpus <= 0:
            continue
        end = min(float(rec.end_time) if rec.end_time is not None else until, until)
        if end > rec.start_time:
            ledger.add_interval(rec.account, gpus, float(rec.start_time), end)
            added += 1
    return added
