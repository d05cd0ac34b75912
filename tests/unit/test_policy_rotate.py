"""Rotation: which opted-in running jobs the fair policy requeues, and which it never touches."""

from __future__ import annotations

from slurm_hase.policy.fair import FairPolicy
from slurm_hase.policy.levels import entitlements
from slurm_hase.policy.rotate import rotation
from slurm_hase.policy.types import ClusterState, GpuPool, PendingJob, RunningJob

NOW = 10_000.0


def pend(jid: str, acct: str, rt: float = 600.0, gpus: int = 1) -> PendingJob:
    return PendingJob(jid, acct, "u", NOW - 60, gpus, {"v100": rt})


def run(jid: str, acct: str, left: float, *, ran: float = 7200.0, pre: bool = True,
        gpus: int = 1) -> RunningJob:
    return RunningJob(jid, acct, "u", "v100", gpus, NOW - ran, NOW + left, preemptible=pre)


def state(running: list[RunningJob], pending: list[PendingJob], free: int = 0,
          total: int = 4, shares: dict[str, float] | None = None) -> ClusterState:
    pools = {"v100": GpuPool("v100", total, free, 1, total)}
    return ClusterState(NOW, pools, pending, running, shares=shares or {})


def allowed(pending: list[PendingJob]) -> dict[str, tuple[str, ...]]:
    return {p.job_id: ("v100",) for p in pending}


def test_entitlement_is_weighted_max_min_capped_by_demand() -> None:
    st = state([run("1", "a", 9e3), run("2", "a", 9e3), run("3", "a", 9e3)],
               [pend("9", "b")], shares={"a": 1.0, "b": 1.0})
    assert entitlements(st, st.pending) == {"a": 3.0, "b": 1.0}


def test_underserved_account_gets_a_gpu_from_the_longest_over_share_job() -> None:
    jobs = [run("1", "a", 9_000), run("2", "a", 50_000), run("3", "a", 20_000), run("4", "a", 30_000)]
    pending = [pend("9", "b", rt=600)]
    out = rotation(state(jobs, pending), pending, allowed(pending), min_run_s=1800, max_per_cycle=8,
                   requeued_nice=70)
    assert [(d.job_id, d.requeue, d.nice) for d in out] == [("2", True, 70)]


def test_never_below_fair_share_never_short_jobs_never_fresh_or_opted_out() -> None:
    pending = [pend("9", "b", rt=600)]
    two = [run("1", "a", 9e3), run("2", "a", 9e3), run("3", "c", 9e3), run("4", "c", 9e3)]
    st = state(two, pending)
    # demands a 2, c 2, b 1 on 4 GPUs -> entitlements a 1.5, c 1.5, b 1: a and c hold 2 each,
    # but giving up one GPU would leave them at 1 < 1.5, below their fair share
    assert entitlements(st, pending) == {"a": 1.5, "c": 1.5, "b": 1.0}
    assert rotation(st, pending, allowed(pending), min_run_s=0, max_per_cycle=8) == []
    full = [run(str(i), "a", 9e3) for i in range(4)]
    # victim would finish sooner than the pending job needs: not worth it
    short = [run(str(i), "a", 300.0) for i in range(4)]
    assert rotation(state(short, pending), pending, allowed(pending), min_run_s=0,
                    max_per_cycle=8) == []
    # ran less than min_run_s
    assert rotation(state(full, pending), pending, allowed(pending), min_run_s=1e9,
                    max_per_cycle=8) == []
    # not opted in
    opted_out = [run(str(i), "a", 9e3, pre=False) for i in range(4)]
    assert rotation(state(opted_out, pending), pending, allowed(pending), min_run_s=0,
                    max_per_cycle=8) == []
    assert rotation(state(full, pending), pending, allowed(pending), min_run_s=0,
                    max_per_cycle=0) == []


def test_free_gpus_are_used_before_anything_is_requeued() -> None:
    jobs = [run("1", "a", 9e3), run("2", "a", 9e3), run("3", "a", 9e3)]
    pending = [pend("9", "b")]
    assert rotation(state(jobs, pending, free=1), pending, allowed(pending), min_run_s=0,
                    max_per_cycle=8) == []


def test_multi_gpu_job_needs_enough_victims_or_none_at_all() -> None:
    jobs = [run(str(i), "a", 9e3 + i) for i in range(4)]
    need3 = [pend("9", "b", gpus=3)]
    # b's entitlement is 2 (a and b both demand >= 2 of 4): a 3-GPU job is over b's share
    assert rotation(state(jobs, need3), need3, allowed(need3), min_run_s=0, max_per_cycle=8) == []
    need2 = [pend("9", "b", gpus=2)]
    out = rotation(state(jobs, need2), need2, allowed(need2), min_run_s=0, max_per_cycle=8)
    assert sorted(d.job_id for d in out) == ["2", "3"]  # the two with most time left
    assert rotation(state(jobs, need2), need2, allowed(need2), min_run_s=0, max_per_cycle=1) == []


def test_srpt_inside_an_account_only_when_much_longer() -> None:
    jobs = [run(str(i), "a", 50_000 + i) for i in range(4)]
    mine = [pend("9", "a", rt=1000)]
    st = state(jobs, mine)
    assert rotation(st, mine, allowed(mine), min_run_s=0, max_per_cycle=8) == []
    out = rotation(st, mine, allowed(mine), min_run_s=0, max_per_cycle=8, srpt_factor=2.0)
    assert [d.job_id for d in out] == ["3"]
    assert rotation(st, mine, allowed(mine), min_run_s=0, max_per_cycle=8, srpt_factor=100.0) == []


def test_fair_policy_emits_requeue_only_with_rotate_on() -> None:
    jobs = [run(str(i), "a", 50_000) for i in range(4)]
    pending = [pend("9", "b", rt=600)]
    st = state(jobs, pending)
    on = FairPolicy(min_run_s=0).decide(st)
    assert [d.job_id for d in on if d.requeue] == ["0"]
    req = next(d for d in on if d.requeue)
    assert req.nice is not None and req.nice > 0  # behind the pending queue after the requeue
    assert not any(d.requeue for d in FairPolicy(rotate=0, min_run_s=0).decide(st))


def test_fairness_only_improves_across_accounts() -> None:
    pending = [pend("9", "a", rt=600)]
    # c holds 3 of 4, a holds 1 and waits for 1 more: shares 2 / 2 -> a at 1.0 after, c at 1.0
    st = state([run("1", "a", 9e3), run("2", "c", 9e3), run("3", "c", 20e3), run("4", "c", 9e3)],
               pending)
    out = rotation(st, pending, allowed(pending), min_run_s=0, max_per_cycle=8)
    assert [d.job_id for d in out] == ["3"]
    # a already holds its 2, c holds 2: taking from c would leave c worse off than a
    st2 = state([run("1", "a", 9e3), run("5", "a", 9e3), run("2", "c", 9e3), run("3", "c", 20e3)],
                pending)
    assert rotation(st2, pending, allowed(pending), min_run_s=0, max_per_cycle=8) == []


def test_service_is_speed_weighted() -> None:
    # shares a 2 : c 1 -> entitlements a 2.67, c 1.33 GPUs. a's two GPUs are slow ones (speed
    # 0.25, service 0.5): counted in GPUs a would end above c (3 / 2.67 > 1 / 1.33); counted in
    # service it ends below (1.5 / 2.67 < 0.75), so it takes c's longest job
    slow = [RunningJob(str(i), "a", "u", "v100", 1, NOW - 7200, NOW + 9e3, relative_speed=0.25,
                       preemptible=True) for i in (1, 2)]
    fast = [run("3", "c", 9e3), run("4", "c", 20e3)]
    pending = [pend("9", "a", rt=600)]
    st = state([*slow, *fast], pending, shares={"a": 2.0, "c": 1.0})
    out = rotation(st, pending, allowed(pending), min_run_s=0, max_per_cycle=8)
    assert [d.job_id for d in out] == ["4"]


def test_migrates_to_an_idle_faster_type_only_when_nobody_waits_for_it() -> None:
    slow = RunningJob("1", "a", "u", "k80", 1, NOW - 7200, NOW + 40_000, relative_speed=0.25,
                      preemptible=True, runtime_s={"k80": 50_000.0, "v100": 12_500.0})
    pools = {"k80": GpuPool("k80", 1, 0, 1, 1), "v100": GpuPool("v100", 1, 1, 1, 1)}
    st = ClusterState(NOW, pools, [], [slow])
    out = rotation(st, [], {}, min_run_s=0, max_per_cycle=8, migrate_margin=0.3,
                   restart_cost_s=300, requeued_nice=10)
    assert [(d.job_id, d.requeue, d.gpu_types, d.nice) for d in out] == [("1", True, ("v100",), 10)]
    # a pending job that may use the v100 (and did not fit elsewhere) keeps it
    waiting = PendingJob("9", "b", "u", NOW, 2, {"v100": 100.0})
    st2 = ClusterState(NOW, pools, [waiting], [slow])
    assert rotation(st2, [waiting], {"9": ("v100",)}, min_run_s=0, max_per_cycle=8,
                    migrate_margin=0.3, restart_cost_s=300) == []
    # not worth it: saving under the margin once the restart is counted
    close = RunningJob("1", "a", "u", "k80", 1, NOW - 7200, NOW + 1000, relative_speed=0.9,
                       preemptible=True, runtime_s={"k80": 1000.0, "v100": 900.0})
    assert rotation(ClusterState(NOW, pools, [], [close]), [], {}, min_run_s=0, max_per_cycle=8,
                    migrate_margin=0.3, restart_cost_s=300) == []


def test_a_job_requeued_max_restarts_times_is_left_to_finish() -> None:
    from dataclasses import replace

    jobs = [replace(run(str(i), "a", 9e3 + i), restarts=3) for i in range(4)]
    pending = [pend("9", "b", rt=600)]
    st = state(jobs, pending)
    assert rotation(st, pending, allowed(pending), min_run_s=0, max_per_cycle=8,
                    max_restarts=3) == []
    out = rotation(st, pending, allowed(pending), min_run_s=0, max_per_cycle=8, max_restarts=4)
    assert [d.job_id for d in out] == ["3"]


def test_srpt_inside_an_account_never_frees_more_gpus_than_its_job_takes() -> None:
    # a's 4-GPU job has far more left than its pending 2-GPU job needs, but requeueing it
    # would hand 2 of a's GPUs to other accounts: reordering inside a must keep a's service
    big = [run("1", "a", 50_000, gpus=4)]
    mine = [pend("9", "a", rt=1000, gpus=2)]
    assert rotation(state(big, mine), mine, allowed(mine), min_run_s=0, max_per_cycle=8,
                    srpt_factor=2.0) == []
    two = [run("1", "a", 50_000, gpus=2), run("2", "a", 60_000, gpus=2)]
    out = rotation(state(two, mine), mine, allowed(mine), min_run_s=0, max_per_cycle=8,
                   srpt_factor=2.0)
    assert [d.job_id for d in out] == ["2"]  # same GPUs back to a's shorter job


def test_rotation_never_takes_an_account_below_the_floor() -> None:
    # a holds 4 slow GPUs (speed 0.4: service 1.6 of entitlement 2, level 0.8); b waits with
    # two 1-GPU jobs (entitlement 2). One requeue leaves a at 0.6 >= b's 0.5: allowed, unless
    # the floor (0.7) guarantees a more.
    slow = [RunningJob(str(i), "a", "u", "v100", 1, NOW - 7200, NOW + 9e3, relative_speed=0.4,
                       preemptible=True) for i in range(4)]
    pending = [pend("8", "b"), pend("9", "b")]
    st = state(slow, pending)
    assert entitlements(st, pending) == {"a": 2.0, "b": 2.0}
    out = rotation(st, pending, allowed(pending), min_run_s=0, max_per_cycle=8)
    assert len(out) == 1 and out[0].requeue
    assert rotation(st, pending, allowed(pending), min_run_s=0, max_per_cycle=8, floor=0.7) == []


def _slow(jid: str, acct: str, left: float) -> RunningJob:
    return RunningJob(jid, acct, "u", "v100", 1, NOW - 7200, NOW + left, relative_speed=0.8,
                      preemptible=True)


def test_narrow_lets_a_starved_one_gpu_account_take_a_gpu_when_the_gap_narrows() -> None:
    # c holds all 4 GPUs at 0.8 of its best speed (service 3.2, entitlement 3, level 1.07); b
    # waits with one job (entitlement 1, level 0). One requeue: b 1.0, c 0.8. The level test
    # refuses (c would end below b); the gap test allows it (|1.0 - 0.8| < |0 - 1.07|).
    pending = [pend("9", "b")]
    jobs = [_slow("1", "c", 9e3), _slow("2", "c", 20e3), _slow("3", "c", 9e3),
            _slow("4", "c", 9e3)]
    st = state(jobs, pending)
    assert entitlements(st, pending) == {"c": 3.0, "b": 1.0}
    assert rotation(st, pending, allowed(pending), min_run_s=0, max_per_cycle=8) == []
    out = rotation(st, pending, allowed(pending), min_run_s=0, max_per_cycle=8, narrow=True)
    assert [d.job_id for d in out] == ["2"]
    # the floor still binds: c may not go below 0.85 of its entitlement
    assert rotation(st, pending, allowed(pending), min_run_s=0, max_per_cycle=8, narrow=True,
                    floor=0.85) == []


def test_narrow_never_widens_the_gap_so_a_move_is_never_undone() -> None:
    # a holds 1 of its 2 (level 0.5) and waits for a second; c holds 3 (entitlement 2, level
    # 1.5). Taking one of c's: a 1.0, c 1.0 -> the gap closes: allowed. Back the other way (c
    # waits at 1.0 for a GPU a holds at 1.0): c 1.5, a 0.5 widens the gap: refused.
    pend_a = [pend("9", "a")]
    st = state([run("1", "a", 9e3), run("2", "c", 9e3), run("3", "c", 20e3),
                run("4", "c", 9e3)], pend_a)
    out = rotation(st, pend_a, allowed(pend_a), min_run_s=0, max_per_cycle=8, narrow=True)
    assert [d.job_id for d in out] == ["3"]
    pend_c = [pend("3", "c")]
    back = state([run("1", "a", 9e3), run("9", "a", 20e3), run("2", "c", 9e3),
                  run("4", "c", 9e3)], pend_c)
    assert rotation(back, pend_c, allowed(pend_c), min_run_s=0, max_per_cycle=8,
                    narrow=True) == []


def test_fair_policy_passes_narrow_to_rotation() -> None:
    pending = [pend("9", "b")]
    st = state([_slow("1", "c", 9e3), _slow("2", "c", 20e3), _slow("3", "c", 9e3),
                _slow("4", "c", 9e3)], pending)
    assert not any(d.requeue for d in FairPolicy(min_run_s=0).decide(st))
    assert [d.job_id for d in FairPolicy(min_run_s=0, narrow=1).decide(st) if d.requeue] == ["2"]
