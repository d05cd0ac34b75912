"""Safety rules between a policy's decisions and `scontrol update`.

plan_updates turns Decisions into JobUpdates and refuses everything unsafe:
- only pending, not held jobs that were observed (so only managed partitions);
- never a Features constraint no usable node of the job's partitions can satisfy;
- never a Features change on a job that asked for a GPU type (typed GRES), prefers features
  (--prefer: Slurm would put them before ours) or carries a constraint we did not set
  (hsbatch's own, recorded in the description, counts as ours);
  never a Nice change over a Nice the user set;
- nothing when nothing changes (Features compared as sets, Nice within a dead band).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from operator import attrgetter

from slurm_hase.errors import DescriptorError
from slurm_hase.policy.common import NICE_MAX
from slurm_hase.policy.types import Decision
from slurm_hase.predict.descriptor import WorkloadDescriptor
from slurm_hase.slurm.tres import asks_shards, convertible_to_share, mps_share_update
from slurm_hase.slurm.types import Job, JobState, JobUpdate, Node

_SIMPLE_OR = re.compile(r"^[A-Za-z0-9_.\-]+(\|[A-Za-z0-9_.\-]+)*$")


@dataclass(frozen=True)
class OwnedAttrs:
    """What the daemon last set on a job (None = never set that attribute), and what it had
    set before an update whose outcome it does not know (sent, then a timeout or a lost
    controller; or recorded ahead and the process killed): both count as the daemon's."""

    nice: int | None = None
    features: str | None = None
    prev_nice: int | None = None
    prev_features: str | None = None

    def owns_nice(self, nice: int) -> bool:
        """Whether the daemon set this Nice (its last value, or the one before an unknown
        outcome)."""
        return nice in (self.nice, self.prev_nice)

    def owns_features(self, features: str) -> bool:
        """Whether the daemon set this non-empty plain OR-list of features (the same types in
        any order, as its last value or the one before an unknown outcome)."""
        current = feature_set(features)
        return bool(current) and any(
            mine is not None and feature_set(mine) == current
            for mine in (self.features, self.prev_features))


def record_owned(owned: MutableMapping[str, OwnedAttrs] | None, job_id: str,
                 update: JobUpdate) -> None:
    """Remember what an applied update set on a job; the attributes it left alone are kept as
    they were, with a value before an unknown outcome still the daemon's too."""
    if owned is None:
        return
    prev = owned.get(job_id, OwnedAttrs())
    owned[job_id] = OwnedAttrs(
        nice=update.nice if update.nice is not None else prev.nice,
        features=update.features if update.features is not None else prev.features,
        prev_nice=None if update.nice is not None else prev.prev_nice,
        prev_features=None if update.features is not None else prev.prev_features)


def record_intent(owned: MutableMapping[str, OwnedAttrs], job_id: str,
                  update: JobUpdate) -> OwnedAttrs | None:
    """Before an update is sent: what it will set, with what the daemon had set before kept as
    its too until the outcome is known. Returns the entry it replaced (None: there was none)."""
    before = owned.get(job_id)
    old = before or OwnedAttrs()
    # an attribute the update leaves alone keeps both its values: after an unknown outcome
    # either may be in Slurm
    owned[job_id] = OwnedAttrs(
        nice=update.nice if update.nice is not None else old.nice,
        features=update.features if update.features is not None else old.features,
        prev_nice=old.nice if update.nice is not None else old.prev_nice,
        prev_features=old.features if update.features is not None else old.prev_features)
    return before


def settle_owned(owned: MutableMapping[str, OwnedAttrs] | None, jobs: Iterable[Job]
                 ) -> set[str]:
    """Drop the value kept from before an unknown outcome once Slurm shows the newer one: the
    update landed, so the older value is the daemon's no longer (a user who sets it later is
    obeyed). The ids of the entries changed."""
    settled: set[str] = set()
    if not owned:
        return settled
    for job in jobs:
        mine = owned.get(job.job_id)
        if mine is None or (mine.prev_nice is None and mine.prev_features is None):
            continue
        nice_landed = mine.prev_nice is not None and job.nice == mine.nice
        features_landed = (mine.prev_features is not None and mine.features is not None
                           and feature_set(job.features) == feature_set(mine.features))
        if nice_landed or features_landed:
            owned[job.job_id] = replace(
                mine, prev_nice=None if nice_landed else mine.prev_nice,
                prev_features=None if features_landed else mine.prev_features)
            settled.add(job.job_id)
    return settled


def restore_owned(owned: MutableMapping[str, OwnedAttrs], job_id: str,
                  before: OwnedAttrs | None) -> None:
    """Put back the entry record_intent replaced (`before`; None: there was none), after an
    update that was not sent or was refused: what the job had is what it has."""
    if before is None:
        owned.pop(job_id, None)
    else:
        owned[job_id] = before


@lru_cache(maxsize=4096)
def feature_set(features: str) -> frozenset[str] | None:
    """Alternatives of a plain OR-list ("a100|v100" -> {a100, v100}); None if not that shape."""
    text = features.strip()
    if not text:
        return frozenset()
    if not _SIMPLE_OR.match(text):
        return None
    return frozenset(t.lower() for t in text.split("|"))


@lru_cache(maxsize=4096)
def lower_features(features: tuple[str, ...]) -> frozenset[str]:
    """A node's Features, lower case."""
    return frozenset(f.lower() for f in features)


@lru_cache(maxsize=4096)
def feature_spelling(features: tuple[str, ...], gtype: str) -> str:
    """The feature of a node's Features that is GPU type `gtype` in any case, as spelt there."""
    return next((f for f in features if f.lower() == gtype), gtype)


def _parts(job: Job) -> tuple[str, ...]:
    return tuple(p for p in job.partition.split(",") if p)


class Capacity:
    """Which GPU types usable nodes can offer, by partition, through node Features."""

    def __init__(self, nodes: Iterable[Node] = ()) -> None:
        # (partition or "*", type) -> (max GPUs on one node, total GPUs)
        self._cap: dict[tuple[str, str], tuple[int, int]] = {}
        self.types: set[str] = set()
        # type (lower case) -> as node Features spell it: Slurm matches features by case, so
        # a constraint names a type that way ("A100" where nodes say Features=A100)
        self.spelled: dict[str, str] = {}
        for node in nodes:
            if not node.usable:
                continue
            feats = lower_features(node.features)
            for raw, count in node.gpus.items():
                gtype = raw.lower()
                if not gtype or count <= 0 or gtype not in feats:
                    continue
                self.add(node.partitions, gtype, count, feature_spelling(node.features, gtype))

    def add(self, partitions: Iterable[str], gtype: str, count: int, spelled: str = "") -> None:
        """Count `count` GPUs of `gtype` on one usable node of `partitions` (Features has gtype,
        spelled so: the first spelling seen is the one constraints use)."""
        self.types.add(gtype)
        self.spelled.setdefault(gtype, spelled or gtype)
        cap = self._cap
        for part in (*partitions, "*"):
            per, tot = cap.get((part, gtype), (0, 0))
            cap[(part, gtype)] = (max(per, count), tot + count)

    def satisfies(self, job: Job, gtype: str) -> bool:
        """Could some usable node(s) of the job's partitions run it under Features=gtype?"""
        req = job.gpu
        need = max(req.count, 1) if req is not None else 1
        per_node = req is not None and req.scope == "node"
        for part in _parts(job) or ("*",):
            per, tot = self._cap.get((part, gtype), (0, 0))
            if (per_node and per >= need) or (not per_node and tot >= need):
                return True
        return False


@lru_cache(maxsize=4096)
def descriptor_of(comment: str) -> WorkloadDescriptor | None:
    """The slurm-hase description in a job comment (None if none or malformed)."""
    try:
        return WorkloadDescriptor.from_comment(comment)
    except DescriptorError:
        return None


def _recorded_types(comment: str) -> tuple[str, ...]:
    """The GPU types of the constraint hsbatch added at submission, in its order, as its
    description records them (() if none)."""
    desc = descriptor_of(comment) if comment and '"at"' in comment else None
    return desc.auto_types if desc is not None else ()


def auto_types(comment: str) -> frozenset[str]:
    """The constraint hsbatch added at submission, as its description records it ({} if none)."""
    return frozenset(_recorded_types(comment))


def submitted_constraint(comment: str) -> str:
    """The constraint hsbatch added at submission as sbatch got it ("a100|v100"; "" if none)."""
    return "|".join(_recorded_types(comment))


def _features_ours(job: Job, rec: OwnedAttrs | None, owned_known: bool,
                   known_types: set[str]) -> bool:
    current = feature_set(job.features)
    if current is None:
        return False  # a complex constraint (&, [], *): always the user's
    if not current:
        return True
    if job.comment and current == auto_types(job.comment):
        return True  # hsbatch's own constraint, recorded in the description
    if owned_known:
        return rec is not None and rec.owns_features(job.features)
    return current <= known_types


def _nice_ours(job: Job, rec: OwnedAttrs | None, owned_known: bool) -> bool:
    if job.nice == 0 or not owned_known:
        return True
    return rec is not None and rec.owns_nice(job.nice)


def plan_updates(
    decisions: Sequence[Decision],
    jobs: Sequence[Job],
    *,
    nodes: Sequence[Node] | None = None,
    owned: Mapping[str, OwnedAttrs] | None = None,
    skipped: list[tuple[str, str]] | None = None,
    nice_min_delta: int = 1,
    nice_limit: int = NICE_MAX,
    nice_quantum: int = 1,
    nice_scale: int = 1,
    capacity: Capacity | None = None,
    nice_zero: int = 0,
    indexed: Mapping[str, Job] | None = None,
    shares_ok: bool = False,
) -> list[tuple[str, JobUpdate]]:
    """Safe, non-empty updates for `decisions`, in decision order.

    Without `nodes` (or `capacity`, the same nodes' Capacity computed by the caller) no Features
    change is planned (satisfiability cannot be checked). Reasons for refused parts go to
    `skipped` (job id, reason) when given. `indexed`: jobs of `jobs` by id where the caller has
    them (run_cycle: the pending ones); a decision for another id is looked up in `jobs`.
    `shares_ok`: Slurm applies a pending job's gres update (slurm/tres.py updates_pending_gres);
    else a decision's MPS share is refused with a note.
    """
    notes: list[tuple[str, str]] = skipped if skipped is not None else []
    decisions = [d for d in decisions if not d.requeue]  # running jobs: daemon/requeue.py
    if not decisions:
        return []
    by_id: dict[str, Job] | None = None  # built only for an id `indexed` lacks
    cap = capacity
    if cap is None and nodes is not None:
        # only a Features decision looks at capacity: a Nice-only cycle skips the node pass
        wants = any(dec.gpu_types is not None for dec in decisions)
        cap = Capacity(nodes) if wants else Capacity()
    known = cap.types if cap is not None else set()
    owned_known = owned is not None
    seen: set[str] = set()
    out: list[tuple[str, JobUpdate]] = []
    for dec in decisions:
        job = indexed.get(dec.job_id) if indexed is not None else None
        if job is None:
            if by_id is None:
                by_id = dict(zip(map(attrgetter("job_id"), jobs), jobs, strict=True))  # C loop
            job = by_id.get(dec.job_id)
        if dec.job_id in seen:
            notes.append((dec.job_id, "duplicate decision"))
            continue
        seen.add(dec.job_id)
        if job is None:
            notes.append((dec.job_id, "not observed (gone or unmanaged partition)"))
            continue
        if job.state is not JobState.PENDING or job.held:
            notes.append((dec.job_id, f"not pending ({job.state.value}{', held' if job.held else ''})"))
            continue
        rec = owned.get(job.job_id) if owned is not None else None
        nice = _plan_nice(dec, job, rec, owned_known, nice_min_delta, nice_limit * nice_scale,
                          nice_quantum, notes, nice_scale, nice_zero)
        feats = _plan_features(dec, job, rec, owned_known, cap, known, notes)
        update = JobUpdate(nice=nice, features=feats,
                           tres_per_node=_plan_share(dec, job, shares_ok, notes))
        if not update.is_empty():
            out.append((job.job_id, update))
    return out


def _plan_nice(dec: Decision, job: Job, rec: OwnedAttrs | None, owned_known: bool,
               min_delta: int, limit: int, quantum: int,
               notes: list[tuple[str, str]], scale: int = 1, zero: int = 0) -> int | None:
    if dec.nice is None:
        return None
    q = max(quantum, 1)
    target = max(-limit, min(limit, int(round((dec.nice - zero) * scale / q)) * q))
    if target == job.nice or abs(target - job.nice) < max(min_delta, 1):
        return None
    if not _nice_ours(job, rec, owned_known):
        notes.append((job.job_id, f"nice {job.nice} set by the user; left alone"))
        return None
    return target


def _plan_features(dec: Decision, job: Job, rec: OwnedAttrs | None, owned_known: bool,
                   cap: Capacity | None, known: set[str],
                   notes: list[tuple[str, str]]) -> str | None:
    if dec.gpu_types is None:
        return None
    if job.gpu is None:
        if not asks_shards(job.tres_per_job, job.tres_per_node):
            notes.append((job.job_id, "no GPU request; constraint left alone"))
            return None
    elif job.gpu.typed:
        notes.append((job.job_id, f"user asked for {job.gpu.gpu_type}; type left alone"))
        return None
    if job.prefer:
        # Slurm tries the preference first and, where it can be met, runs the job there in
        # place of any constraint: a type the daemon set would not hold (seen on 22.05)
        notes.append((job.job_id, f"user prefers {job.prefer!r} (--prefer), which Slurm puts "
                                  "before any constraint; constraint left alone"))
        return None
    if cap is None:
        notes.append((job.job_id, "no node view; constraint not changed"))
        return None
    if not _features_ours(job, rec, owned_known, known):
        notes.append((job.job_id, f"user constraint {job.features!r}; left alone"))
        return None
    wanted: list[str] = []
    for t in dec.gpu_types:
        key = t.lower()
        if key in wanted:
            continue
        if cap.satisfies(job, key):
            wanted.append(key)
    dropped = [t for t in dec.gpu_types if t.lower() not in wanted]
    if dec.gpu_types and not wanted:
        notes.append((job.job_id, f"no usable node satisfies {'|'.join(dec.gpu_types)}"))
        return None
    if dropped:
        notes.append((job.job_id, f"dropped unsatisfiable types {','.join(dropped)}"))
    target = "|".join(cap.spelled.get(t, t) for t in wanted)
    if frozenset(target.split("|")) == frozenset(job.features.strip().split("|")):
        return None  # the same types in any order, spelt as the nodes spell them
    return target


def _plan_share(dec: Decision, job: Job, shares_ok: bool,
                notes: list[tuple[str, str]]) -> str | None:
    """The TresPerNode that turns the job into the decision's MPS share, or None."""
    if dec.mps_share is None:
        return None
    if not shares_ok:
        notes.append((job.job_id, "this Slurm does not apply a pending job's gres update "
                                  "(24.11 or later does); MPS share not set"))
        return None
    if job.gpu is None or not convertible_to_share(job.gpu) or dec.mps_share <= 0:
        notes.append((job.job_id, "asks no single untyped GPU per node; MPS share not set"))
        return None
    return mps_share_update(dec.mps_share)
