"""Digests of a cycle's policy inputs (recorded with every cycle and every planned update).

A StateCache keeps the repr text of each job record between cycles, so a cycle re-reads only
the records that changed.
"""

from __future__ import annotations

import hashlib

from slurm_hase.daemon.state import StateCache
from slurm_hase.policy.types import ClusterState, PendingJob


def state_digest(state: ClusterState, cache: StateCache | None = None) -> str:
    """A short stable digest of a policy's inputs (recorded with every cycle).

    The sha1 of repr((now, pools, shares, usage, pending keys, running keys)); with `cache`
    the repr of each job's key is kept between cycles, so only the join and the hash are O(n).
    """
    old = cache.texts if cache is not None else {}
    new: dict[str, tuple[object, str]] = {}
    pend = []
    for p in state.pending:
        e = old.get(p.job_id)
        if e is None or e[0] is not p:
            e = (p, repr(_pending_key(p)))
        new[p.job_id] = e
        pend.append(e[1])
    run = []
    for r in state.running:
        e = old.get(r.job_id)
        if e is None or e[0] is not r:
            e = (r, repr((r.job_id, r.gpu_type, r.num_gpus, r.gpu_fraction, r.start_time,
                          r.expected_end, r.relative_speed)))
        new[r.job_id] = e
        run.append(e[1])
    if cache is not None:
        cache.texts = new
    # exactly repr() of the 6-tuple (lists of reprs joined as repr(list) does)
    text = "".join((
        "(", repr(state.now), ", ", repr(sorted(state.pools.items())), ", ",
        repr(sorted(state.shares.items())), ", ", repr(sorted(state.usage.items())), ", [",
        ", ".join(pend), "], [", ", ".join(run), "])"))
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:16]


def _pending_key(p: PendingJob) -> tuple[object, ...]:
    return (p.job_id, p.account, p.user, p.submit_time, p.num_gpus, tuple(p.runtime_s.items()),
            p.gpu_fraction, tuple(p.mps_slowdown.items()), p.pinned_type, p.nice, p.features,
            p.memory_gb, p.preemptible) + ((True,) if p.may_share else ())


def job_digest(p: PendingJob, cache: StateCache | None = None) -> str:
    """Digest of one pending job's policy inputs."""
    e = cache.texts.get(p.job_id) if cache is not None else None
    text = e[1] if e is not None and e[0] is p else repr(_pending_key(p))
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:16]
