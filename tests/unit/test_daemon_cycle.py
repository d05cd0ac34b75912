"""run_cycle end to end on the FakeBackend: observe -> decide -> plan -> act."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from slurm_hase.daemon.cycle import (
    CycleConfig,
    CycleResult,
    JobEstimate,
    OwnedAttrs,
    build_state,
    observe,
    run_cycle,
)
from slurm_hase.daemon.fake import FakeBackend, gpu_node
from slurm_hase.errors import SlurmCommandError, SlurmUnavailableError
from slurm_hase.policy.types import ClusterState, Decision
from slurm_hase.policy.usage import UsageLedger
from slurm_hase.slurm.types import GpuRequest, Job, JobState, JobUpdate

SPEED = {"a100": 100.0, "v100": 200.0, "t4": 300.0}


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def now(self) -> float:
        return self.t


class TableEstimator:
    """Runtime per type from SPEED; jobs named 'unknown' get None; counts calls."""

    def __init__(self) -> None:
        self.calls = 0

    def estimate(self, job: Job, gpu_types: Sequence[str]) -> JobEstimate | None:
        self.calls += 1
        if job.name == "unknown":
            return None
        return JobEstimate({t: SPEED[t] for t in gpu_types if t in SPEED})


@dataclass
class Scripted:
    """A policy that returns fixed decisions and remembers the state it saw."""

    decisions: list[Decision] = field(default_factory=list)
    seen: list[ClusterState] = field(default_factory=list)
    name: str = "scripted"
    summary: str = "test"

    def decide(self, state: ClusterState) -> list[Decision]:
        self.seen.append(state)
        return list(self.decisions)


def pjob(jid: str, *, typed: str | None = None, features: str = "", nice: int = 0,
         partition: str = "gpu", name: str = "train", account: str = "a") -> Job:
    return Job(job_id=jid, name=name, user="u", account=account, partition=partition,
               state=JobState.PENDING, nice=nice, features=features,
               gpu=GpuRequest(1, typed, "job"), submit_time=500)


def rjob(jid: str, gtype: str, account: str = "b") -> Job:
    return Job(job_id=jid, name="train", user="u", account=account, partition="gpu",
               state=JobState.RUNNING, gpu=GpuRequest(1, None, "job"), alloc_gpus={gtype: 1},
               start_time=900, time_limit_s=10_000)


NODES = [gpu_node("a1", "a100", alloc=1), gpu_node("v1", "v100"), gpu_node("t1", "t4"),
         gpu_node("o1", "t4", partition="other")]


def run(backend: FakeBackend, policy: Scripted, *, dry_run: bool = False,
        owned: dict[str, OwnedAttrs] | None = None) -> CycleResult:
    cfg = CycleConfig(partitions=("gpu",), dry_run=dry_run)
    return run_cycle(backend, policy, TableEstimator(), Clock(), UsageLedger(3600.0), {"a": 1.0},
                     cfg, owned=owned)


def test_observe_filters_partitions() -> None:
    fb = FakeBackend([pjob("1"), pjob("2", partition="other"), pjob("3", partition="gpu,other")],
                     NODES)
    jobs, nodes = observe(fb, CycleConfig(partitions=("gpu",)))
    assert [j.job_id for j in jobs] == ["1"]
    assert sorted(n.name for n in nodes) == ["a1", "t1", "v1"]
    jobs, _ = observe(fb, CycleConfig())
    assert len(jobs) == 3


def test_build_state_pools_pending_running() -> None:
    jobs = [pjob("1"), pjob("2", typed="a100"), pjob("3", name="unknown"), rjob("9", "v100")]
    nodes = [*NODES[:3], gpu_node("d1", "a100", state="DOWN")]
    st = build_state(jobs, nodes, TableEstimator(), {"b": 5.0}, {"a": 2.0}, 1000.0,
                     CycleConfig(partitions=("gpu",)))
    assert st.pools["a100"].total_gpus == 4 and st.pools["a100"].free_gpus == 3
    assert set(st.pools) == {"a100", "v100", "t4"}
    assert [p.job_id for p in st.pending] == ["1", "2"]  # unknown job left out
    assert st.pending[1].pinned_type == "a100"
    assert st.pending[0].runtime_s == {"a100": 100.0, "v100": 200.0, "t4": 300.0}
    (r,) = st.running
    assert r.gpu_type == "v100" and r.relative_speed == pytest.approx(0.5)
    assert r.expected_end == 900 + 200.0
    assert st.usage == {"b": 5.0} and st.shares == {"a": 2.0}


def test_cycle_applies_and_second_cycle_is_quiet() -> None:
    fb = FakeBackend([pjob("1"), pjob("2")], NODES)
    pol = Scripted([Decision("1", nice=50, gpu_types=("a100", "v100")), Decision("2", nice=10)])
    owned: dict[str, OwnedAttrs] = {}
    res = run(fb, pol, owned=owned)
    assert res.applied == [("1", JobUpdate(nice=50, features="a100|v100")),
                           ("2", JobUpdate(nice=10))]
    assert owned["1"] == OwnedAttrs(nice=50, features="a100|v100")
    assert res.inputs_digest and set(res.job_digests) == {"1", "2"}
    res2 = run(fb, pol, owned=owned)
    assert res2.applied == [] and len(fb.updates) == 2
    # same constraint in another order is not a change either
    pol.decisions = [Decision("1", gpu_types=("v100", "a100"))]
    assert run(fb, pol, owned=owned).planned == []


def test_dry_run_touches_nothing() -> None:
    fb = FakeBackend([pjob("1")], NODES)
    res = run(fb, Scripted([Decision("1", nice=5)]), dry_run=True)
    assert res.planned == [("1", JobUpdate(nice=5))] and res.applied == []
    assert fb.updates == []


def test_observe_failure_propagates_for_backoff() -> None:
    fb = FakeBackend([pjob("1")], NODES)
    fb.unavailable = True
    with pytest.raises(SlurmUnavailableError):
        run(fb, Scripted())


def test_job_gone_between_observe_and_act() -> None:
    fb = FakeBackend([pjob("1"), pjob("2"), pjob("3")], NODES)
    fb.fail_updates["2"] = SlurmCommandError(["scontrol"], 1, "Job is no longer pending execution")
    fb.before_update = lambda jid: fb.cancel("1") if jid == "1" else None
    res = run(fb, Scripted([Decision(j, nice=7) for j in ("1", "2", "3")]))
    assert [j for j, _ in res.applied] == ["3"]
    assert {j for j, _ in res.skipped} == {"1", "2"}
    assert res.errors == []


def test_refused_update_is_an_error_not_a_crash() -> None:
    fb = FakeBackend([pjob("1"), pjob("2")], NODES)
    fb.fail_updates["1"] = SlurmCommandError(["scontrol"], 1, "Invalid feature specification")
    res = run(fb, Scripted([Decision("1", nice=3), Decision("2", nice=3)]))
    assert [j for j, _ in res.errors] == ["1"]
    assert [j for j, _ in res.applied] == ["2"]


def test_controller_lost_while_acting_stops_cycle() -> None:
    fb = FakeBackend([pjob("1"), pjob("2"), pjob("3")], NODES)

    def die(jid: str) -> None:
        if jid == "2":
            fb.unavailable = True

    fb.before_update = die
    res = run(fb, Scripted([Decision(j, nice=4) for j in ("1", "2", "3")]))
    assert res.unavailable
    assert [j for j, _ in res.applied] == ["1"]
    assert ("3", "slurm unavailable") in res.skipped


def test_ledger_accumulates_running_service() -> None:
    fb = FakeBackend([rjob("9", "a100", account="b")], NODES)
    ledger, clock = UsageLedger(3600.0), Clock(1000.0)
    cfg = CycleConfig()
    run_cycle(fb, Scripted(), TableEstimator(), clock, ledger, {}, cfg)
    clock.t = 1100.0
    pol = Scripted()
    run_cycle(fb, pol, TableEstimator(), clock, ledger, {}, cfg)
    assert pol.seen[0].usage["b"] == pytest.approx(100.0, rel=0.02)


@pytest.mark.parametrize("lists", [True, False])
def test_batched_updates_same_outcomes(lists: bool) -> None:
    fb = FakeBackend([pjob(str(i)) for i in range(1, 8)], NODES)
    fb.accepts_lists = lists  # False: every batch fails and is retried job by job
    fb.before_update = lambda jid: fb.cancel("3") if "," in jid else None  # 3 ends mid-act
    decs = [Decision(str(i), nice=5 + 10 * (i % 2), gpu_types=("a100",)) for i in range(1, 8)]
    res = run_cycle(fb, Scripted(decs), TableEstimator(), Clock(), UsageLedger(60.0), {},
                    CycleConfig(batch_updates=True, update_workers=3))
    assert sorted(j for j, _ in res.applied) == ["1", "2", "4", "5", "6", "7"]
    assert [j for j, _ in res.skipped] == ["3"] and res.errors == []
    assert {j: u.nice for j, u in res.applied} == {j: 5 + 10 * (int(j) % 2) for j, _ in res.applied}


def _reference_digest(state: ClusterState) -> str:
    """state_digest as first written: sha1 of repr() of the whole payload."""
    import hashlib

    from slurm_hase.daemon.digest import _pending_key

    payload = (state.now, sorted(state.pools.items()), sorted(state.shares.items()),
               sorted(state.usage.items()), [_pending_key(p) for p in state.pending],
               [(r.job_id, r.gpu_type, r.num_gpus, r.gpu_fraction, r.start_time, r.expected_end,
                 r.relative_speed) for r in state.running])
    return hashlib.sha1(repr(payload).encode(), usedforsecurity=False).hexdigest()[:16]


def test_cached_build_state_and_digest_match_uncached() -> None:
    from dataclasses import replace as dreplace

    from slurm_hase.daemon.digest import job_digest, state_digest
    from slurm_hase.daemon.state import StateCache

    cache = StateCache()
    cfg = CycleConfig(partitions=("gpu",))
    nodes = [*NODES[:3]]
    rounds = [
        [pjob("1"), pjob("2", typed="a100"), rjob("9", "v100")],
        [pjob("1"), pjob("2", typed="a100"), rjob("9", "v100")],  # same objects rebuilt
        [pjob("1", nice=30), pjob("2", typed="a100", features="x"), rjob("9", "v100")],
        [pjob("1", nice=30), dreplace(pjob("3"), submit_time=None), rjob("9", "t4")],
        [],
        [pjob("1", nice=30)],
    ]
    now = 1000.0
    for jobs in rounds:
        for nodes_now in (nodes, [*nodes[:2], gpu_node("t1", "t4", state="DOWN")]):
            est_a, est_b = TableEstimator(), TableEstimator()
            plain = build_state(jobs, nodes_now, est_a, {"b": 1.5}, {"a": 2.0}, now, cfg)
            cached = build_state(jobs, nodes_now, est_b, {"b": 1.5}, {"a": 2.0}, now, cfg,
                                 cache=cache)
            assert cached == plain
            assert est_a.calls == est_b.calls  # the estimator is asked exactly as often
            assert state_digest(cached, cache) == state_digest(plain) == _reference_digest(plain)
            assert state_digest(cached, cache) == _reference_digest(cached)  # warm texts
            for p in cached.pending:
                assert job_digest(p, cache) == job_digest(p)
            now += 5000.0  # running jobs overrun their expected end: expected_end follows now


class RepeatableTable(TableEstimator):
    """TableEstimator that says its answer for the same Job object never changes."""

    repeatable = True


def test_repeatable_cache_follows_reused_job_objects_through_state_changes() -> None:
    from slurm_hase.daemon.state import StateCache, _build_state

    cache = StateCache()
    cfg = CycleConfig(partitions=("gpu",))
    p1, p2, p3 = pjob("1"), pjob("2", typed="a100"), pjob("3", nice=30)
    held, r1 = Job(**{**p3.__dict__, "held": True}), rjob("1", "v100")
    unknown = Job(**{**p2.__dict__, "name": "unknown"})  # no estimate: no record
    # the very same objects come back, and an id comes back as another object in another state
    rounds = [[p1, p2, p3], [p1, p2, p3], [r1, p2, held], [r1, p2, held], [r1, unknown, p3],
              [p1, p2, p3], [p2]]
    now = 1000.0
    for jobs in rounds:
        plain = _build_state(jobs, NODES, RepeatableTable(), {}, {}, now, cfg, None)
        cached = _build_state(jobs, NODES, RepeatableTable(), {}, {}, now, cfg, cache)
        assert cached == plain  # the state, the pending ids and the counts by asked type
        now += 60.0


def test_running_job_reused_only_while_inputs_match() -> None:
    from slurm_hase.daemon.state import StateCache

    cache = StateCache()
    cfg = CycleConfig(partitions=("gpu",))
    job = rjob("9", "v100")
    first = build_state([job], NODES, TableEstimator(), {}, {}, 1000.0, cfg, cache=cache)
    again = build_state([job], NODES, TableEstimator(), {}, {}, 1010.0, cfg, cache=cache)
    assert again.running[0] is first.running[0]
    moved = Job(**{**job.__dict__, "start_time": 950})
    later = build_state([moved], NODES, TableEstimator(), {}, {}, 1010.0, cfg, cache=cache)
    assert later.running[0].start_time == 950.0 and later.running[0].expected_end == 950 + 200.0


def test_run_cycle_result_same_with_fresh_and_warm_cache() -> None:
    fb = FakeBackend([pjob("1"), pjob("2"), rjob("9", "v100")], NODES)
    pol = Scripted([Decision("1", nice=50, gpu_types=("a100", "v100")), Decision("2", nice=10)])
    res = run(fb, pol, dry_run=True)
    res2 = run(fb, pol, dry_run=True)
    assert res2.planned == res.planned and res2.inputs_digest == res.inputs_digest
    assert res2.job_digests == res.job_digests and res2.pending_ids == res.pending_ids
    assert res.pending_by_type == {"": 2}
    assert res.inputs_digest == _reference_digest(pol.seen[0])


def test_cache_reuses_records_of_the_very_same_job_objects_and_sees_replacements() -> None:
    from slurm_hase.daemon.state import StateCache

    cache = StateCache()
    cfg = CycleConfig(partitions=("gpu",))
    jobs = [pjob("1"), pjob("2", typed="a100"), rjob("9", "v100")]
    first = build_state(jobs, NODES, TableEstimator(), {}, {}, 1000.0, cfg, cache=cache)
    again = build_state(jobs, NODES, TableEstimator(), {}, {}, 1060.0, cfg, cache=cache)
    assert again.pending[0] is first.pending[0] and again.running[0] is first.running[0]
    assert again == build_state(jobs, NODES, TableEstimator(), {}, {}, 1060.0, cfg)
    swapped = [Job(**{**jobs[0].__dict__, "nice": 20}), *jobs[1:]]
    later = build_state(swapped, NODES, TableEstimator(), {}, {}, 1060.0, cfg, cache=cache)
    assert later.pending[0].nice == 20 and later.pending[1] is first.pending[1]
    # a Nice-only change keeps the record's mappings (policies' memos key on them)
    assert later.pending[0].runtime_s is first.pending[0].runtime_s
    assert later == build_state(swapped, NODES, TableEstimator(), {}, {}, 1060.0, cfg)


def test_policies_see_nice_in_their_own_units() -> None:
    cfg = CycleConfig(partitions=("gpu",), nice_scale=1101)
    st = build_state([pjob("1", nice=11010), pjob("2")], NODES, TableEstimator(), {}, {},
                     1000.0, cfg)
    assert [p.nice for p in st.pending] == [10, 0]


def test_nice_zero_maps_policy_levels_to_negative_nice_and_back() -> None:
    cfg = CycleConfig(partitions=("gpu",), nice_scale=1100, nice_zero=10_000)
    fb = FakeBackend([pjob("1"), pjob("2")], NODES)
    pol = Scripted([Decision("1", nice=9_990), Decision("2", nice=10_000)])
    res = run_cycle(fb, pol, TableEstimator(), Clock(), UsageLedger(3600.0), {"a": 1.0}, cfg)
    # level 999 -> -11000 (raised above every untouched job); the top level is Nice 0: no update
    assert res.planned == [("1", JobUpdate(nice=-11_000))]
    seen = build_state(fb.jobs(), NODES, TableEstimator(), {}, {}, 1000.0, cfg)
    assert {p.job_id: p.nice for p in seen.pending} == {"1": 9_990, "2": 10_000}


class RepeatableEstimator(TableEstimator):
    """TableEstimator that declares one answer per Job object and GPU types."""

    repeatable = True


def test_repeatable_estimator_is_not_asked_again_about_the_very_same_jobs() -> None:
    from dataclasses import replace as dreplace

    from slurm_hase.daemon.state import StateCache, _build_state

    cfg = CycleConfig(partitions=("gpu",))
    jobs = [pjob("1"), pjob("2", typed="a100"), pjob("3", features="v100"), rjob("9", "v100")]
    # kept out of the records (held, no GPU) or rebuilt every time (no submit time: `now`)
    odd = [dreplace(pjob("4"), held=True), dreplace(pjob("5"), gpu=None),
           dreplace(pjob("6"), submit_time=None)]
    cache, est = StateCache(), RepeatableEstimator()
    first_odd = _build_state(jobs + odd, NODES, est, {}, {}, 1000.0, cfg, cache)
    again_odd = _build_state(jobs + odd, NODES, est, {}, {}, 1060.0, cfg, cache)
    assert again_odd == _build_state(jobs + odd, NODES, est, {}, {}, 1060.0, cfg, None)
    assert [p.job_id for p in again_odd[0].pending] == ["1", "2", "3", "6"]
    assert again_odd[0].pending[3].submit_time == 1060.0 != first_odd[0].pending[3].submit_time
    assert again_odd[2] == {"": 3, "a100": 1, "v100": 1}  # 1, held 4 and 6; not GPU-less 5
    cache, est = StateCache(), RepeatableEstimator()
    first = _build_state(jobs, NODES, est, {}, {}, 1000.0, cfg, cache)
    asked = est.calls
    # 5000 s later the running job has overrun its expected end (900 + 200 s): it follows now
    again = _build_state(jobs, NODES, est, {}, {}, 6000.0, cfg, cache)
    assert est.calls == asked
    assert again[0].pending == first[0].pending and again[0].pending[0] is first[0].pending[0]
    assert again[1:] == first[1:]  # pending ids, counts by asked type
    assert again[0] == _build_state(jobs, NODES, TableEstimator(), {}, {}, 6000.0, cfg, None)[0]
    assert again[0].running[0].expected_end == 6000.0
    # a new Job object (the backend saw a change) is asked about again
    changed = [Job(**{**jobs[0].__dict__, "nice": 20}), *jobs[1:]]
    later = _build_state(changed, NODES, est, {}, {}, 6060.0, cfg, cache)
    assert est.calls == asked + 1 and later[0].pending[0].nice == 20


def test_other_estimators_are_asked_every_cycle() -> None:
    from slurm_hase.daemon.state import StateCache

    cfg = CycleConfig(partitions=("gpu",))
    jobs = [pjob("1"), rjob("9", "v100")]
    cache, est = StateCache(), TableEstimator()
    build_state(jobs, NODES, est, {}, {}, 1000.0, cfg, cache=cache)
    asked = est.calls
    build_state(jobs, NODES, est, {}, {}, 1060.0, cfg, cache=cache)
    assert est.calls == 2 * asked


def test_cached_node_summary_follows_every_node_change() -> None:
    from slurm_hase.daemon.state import StateCache, _node_summary, _summarize

    cache = StateCache()
    rounds = [
        NODES,
        [gpu_node("a1", "a100", alloc=3), *NODES[1:]],  # an allocation: pools move, not capacity
        [gpu_node("a1", "a100", alloc=3), gpu_node("v1", "v100", features=()), *NODES[2:]],
        [gpu_node("a1", "a100", alloc=3, state="DOWN"), *NODES[1:]],
        [*NODES[:2], gpu_node("t1", "t4", gpus=8, partition="other"), NODES[3]],
        NODES,
    ]
    for nodes in rounds:
        pools, cap = _node_summary(nodes, cache)
        fresh_pools, fresh_cap = _summarize(nodes)
        assert pools == fresh_pools
        assert cap.types == fresh_cap.types and cap._cap == fresh_cap._cap
