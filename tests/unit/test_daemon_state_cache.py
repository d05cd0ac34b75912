"""build_state's StateCache: records of unchanged jobs reused, gone ones dropped, the same
state and digests as without it."""

from __future__ import annotations

from slurm_hase.daemon.cycle import CycleConfig, build_state
from slurm_hase.daemon.fake import FakeBackend, gpu_node
from slurm_hase.policy.types import ClusterState, Decision
from slurm_hase.slurm.types import Job
from tests.unit.test_daemon_cycle import NODES, Scripted, TableEstimator, pjob, rjob, run


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


def test_state_cache_drops_entries_of_gone_jobs_in_bulk() -> None:
    from slurm_hase.daemon.state import StateCache

    cache = StateCache()
    cfg = CycleConfig(partitions=("gpu",))
    many = [pjob(str(i)) for i in range(1100)]
    build_state(many, NODES[:3], TableEstimator(), {}, {}, 1000.0, cfg, cache=cache)
    assert len(cache.pending) == 1100
    few = many[:8]
    plain = build_state(few, NODES[:3], TableEstimator(), {}, {}, 1000.0, cfg)
    # 1,100 entries > 2 x 8 + 1,024: the entries of the 1,092 gone jobs are dropped
    assert build_state(few, NODES[:3], TableEstimator(), {}, {}, 1000.0, cfg, cache=cache) == plain
    assert sorted(cache.pending) == sorted(j.job_id for j in few)


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


def test_repeatable_estimator_is_not_asked_about_new_jobs_equal_but_for_priority() -> None:
    from slurm_hase.daemon.state import StateCache, _build_state

    cfg = CycleConfig(partitions=("gpu",))
    jobs = [pjob("1"), pjob("2", typed="a100"), pjob("3", features="v100"), rjob("9", "v100")]
    cache, est = StateCache(), RepeatableEstimator()
    first = _build_state(jobs, NODES, est, {}, {}, 1000.0, cfg, cache)
    asked = est.calls
    # what squeue parses a minute later: new objects; of the pending ones, the priority, the
    # reason and backfill's projected start and end moved
    parsed = [Job(**{**j.__dict__, "priority": j.priority + 7, "reason": "Priority",
                     "start_time": 5000 + k, "end_time": 9000 + k})
              if j.pending else Job(**j.__dict__) for k, j in enumerate(jobs)]
    again = _build_state(parsed, NODES, est, {}, {}, 1060.0, cfg, cache)
    assert est.calls == asked + 1  # only the running job (its record path is unchanged)
    assert all(a is b for a, b in zip(again[0].pending, first[0].pending, strict=True))
    assert again[0] == _build_state(parsed, NODES, TableEstimator(), {}, {}, 1060.0, cfg, None)[0]
    assert again[1] == {j.job_id: j for j in parsed if j.pending}  # the newest Job objects
    # every other field still counts: a new comment (another descriptor) is asked about again
    for name, value in (("comment", "other"), ("nice", 20), ("time_limit_s", 999)):
        moved = [Job(**{**parsed[0].__dict__, name: value}), *parsed[1:]]
        est.calls = 0
        later = _build_state(moved, NODES, est, {}, {}, 1120.0, cfg, cache)
        assert est.calls == 1, name
        assert later[0] == _build_state(moved, NODES, TableEstimator(), {}, {}, 1120.0, cfg,
                                        None)[0]


def test_other_estimators_are_asked_every_cycle() -> None:
    from slurm_hase.daemon.state import StateCache

    cfg = CycleConfig(partitions=("gpu",))
    jobs = [pjob("1"), rjob("9", "v100")]
    cache, est = StateCache(), TableEstimator()
    build_state(jobs, NODES, est, {}, {}, 1000.0, cfg, cache=cache)
    asked = est.calls
    assert asked > 0
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
        pools, cap, _, _ = _node_summary(nodes, cache)
        fresh_pools, fresh_cap, _, _ = _summarize(nodes)
        assert pools == fresh_pools
        assert cap.types == fresh_cap.types and cap._cap == fresh_cap._cap


def test_requeued_job_with_new_nice_gets_its_new_restart_count() -> None:
    """A requeue bumps restarts while the daemon moves its Nice: the cached record must not keep
    the old count (idle fill and rotation stop at max_restarts by it)."""
    from dataclasses import replace as dreplace

    from slurm_hase.daemon.state import StateCache

    cache = StateCache()
    cfg = CycleConfig(partitions=("gpu",))
    est = TableEstimator()
    first = dreplace(pjob("1"), requeue=True)
    build_state([first], NODES[:3], est, {}, {}, 1000.0, cfg, cache=cache)
    again = dreplace(first, restarts=1, nice=first.nice + 100)
    cached = build_state([again], NODES[:3], est, {}, {}, 1060.0, cfg, cache=cache)
    plain = build_state([again], NODES[:3], TableEstimator(), {}, {}, 1060.0, cfg)
    assert cached.pending[0].restarts == plain.pending[0].restarts == 1
