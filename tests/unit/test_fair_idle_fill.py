"""fair's idle fill (policy/route.py) and migration with an empty queue (policy/rotate.py)."""

from __future__ import annotations

import pytest

from slurm_hase.errors import PolicyError
from slurm_hase.policy.fair import FairPolicy
from slurm_hase.policy.types import ClusterState, Decision, GpuPool, PendingJob, RunningJob

NOW = 100_000.0
LONG = {"v100": 10_000.0, "k80": 40_000.0}  # k80 at 0.25 x its best speed


def ckpt(jid: str, acct: str, gpus: int = 2, rt: dict[str, float] | None = None,
         restarts: int = 0) -> PendingJob:
    """A pending job that opted in to checkpoint/requeue (PendingJob.preemptible)."""
    return PendingJob(jid, acct, "u", NOW - 100 + int(jid), gpus, rt or LONG, preemptible=True,
                      restarts=restarts)


def busy_v100(acct: str = "b", left: float = 20_000.0, gpus: int = 2) -> RunningJob:
    """Holds the v100s for `left` seconds: a long job routed to v100 waits that long."""
    return RunningJob("90", acct, "u", "v100", gpus, NOW - 3600, NOW + left)


def state(pending: list[PendingJob], running: list[RunningJob], k80_free: int = 4
          ) -> ClusterState:
    pools = {"v100": GpuPool("v100", 2, 0), "k80": GpuPool("k80", 4, k80_free)}
    return ClusterState(NOW, pools, pending, running)


def types(decisions: list[Decision]) -> dict[str, tuple[str, ...] | None]:
    return {d.job_id: d.gpu_types for d in decisions if not d.requeue}


def test_a_waiting_opted_in_job_of_an_unserved_account_starts_now_on_the_idle_slow_type() -> None:
    st = state([ckpt("1", "a")], [busy_v100()])
    # routed: v100 frees in 20,000 s and finishes it at 30,000 s; k80 would take 40,000 s
    assert types(FairPolicy(theta=0.0).decide(st)) == {"1": ("v100",)}
    assert types(FairPolicy(theta=0.0, idle_fill=0.5).decide(st)) == {"1": ("k80",)}


def test_idle_fill_leaves_jobs_that_did_not_opt_in_short_waits_and_fast_types_alone() -> None:
    plain = PendingJob("1", "a", "u", NOW - 100, 2, LONG)
    assert not plain.preemptible and ckpt("1", "a").preemptible
    pol = FairPolicy(theta=0.0, idle_fill=0.5)
    assert types(pol.decide(state([plain], [busy_v100()]))) == {"1": ("v100",)}
    # waits only 1,000 s for its routed type (fill_wait_s is 2 h)
    assert types(pol.decide(state([ckpt("1", "a")], [busy_v100(left=1000.0)]))) == {"1": ("v100",)}
    # k80 at 0.6 x its best speed: above fill_speed (0.5), so not a slow type for this job
    near = {"v100": 10_000.0, "k80": 16_700.0}
    st = state([ckpt("1", "a", rt=near)], [busy_v100(left=5000.0)])
    pol = FairPolicy(theta=0.0, idle_fill=0.5, fill_wait_s=3600.0)
    assert types(pol.decide(st)) == {"1": ("v100",)}
    pol = FairPolicy(theta=0.0, idle_fill=0.5, fill_wait_s=3600.0, fill_speed=0.7)
    assert types(pol.decide(st)) == {"1": ("k80",)}


def test_a_job_that_can_no_longer_be_requeued_is_never_idle_filled() -> None:
    # rotation's migration needs one more requeue to move a filled job back to a fast type; a job
    # at max_restarts would run to its end on the slow type (Philly bench, seed 2: a 1-GPU job of
    # 139 h on V100 ran 1,368 h on K80 after its third requeue)
    tired = ckpt("1", "a", restarts=3)
    st = state([tired], [busy_v100()])
    assert types(FairPolicy(theta=0.0, idle_fill=0.5).decide(st)) == {"1": ("v100",)}
    assert types(FairPolicy(theta=0.0, idle_fill=0.5, max_restarts=4).decide(st)) == {"1": ("k80",)}


def test_idle_fill_serves_the_lowest_level_account_first_and_only_below_the_threshold() -> None:
    slow = {"v100": 10_000.0, "k80": 45_000.0}  # both wait for the v100s, one after the other
    pending = [ckpt("1", "c", rt=slow), ckpt("2", "a", rt=slow)]
    run = [busy_v100("b", gpus=1), RunningJob("91", "c", "u", "v100", 1, NOW - 60, NOW + 20_000)]
    # 4 k80s free: a holds nothing (level 0), c one GPU of 3 entitled (1/3)
    out = types(FairPolicy(theta=0.0, idle_fill=0.5).decide(state(pending, run)))
    assert out == {"1": ("k80",), "2": ("k80",)}
    out = types(FairPolicy(theta=0.0, idle_fill=0.3).decide(state(pending, run)))
    assert out == {"1": ("v100",), "2": ("k80",)}  # c (1/3) is not below 0.3
    # 2 k80s free (e holds the others) and a's past usage puts c first in the fair order:
    # the free k80s still go to a, the account with the lowest level now (0 vs c's 0.6)
    run.append(RunningJob("92", "e", "u", "k80", 2, NOW - 60, NOW + 90_000))
    st = state(pending, run, k80_free=2)
    st = ClusterState(NOW, st.pools, pending, run, usage={"a": 1e9})
    out = types(FairPolicy(theta=0.0, idle_fill=0.7).decide(st))
    assert out == {"1": ("v100",), "2": ("k80",)}


def test_an_idle_filled_job_goes_first_in_the_order() -> None:
    short = PendingJob("3", "d", "u", NOW - 5000, 1, {"v100": 600.0})  # earlier in fair order
    st = state([short, ckpt("1", "a")], [busy_v100()])
    st = ClusterState(NOW, st.pools, st.pending, st.running, usage={"a": 1e9})  # a goes last

    def order(pol: FairPolicy) -> list[str]:
        nice = {d.job_id: d.nice for d in pol.decide(st) if d.nice is not None}
        return sorted(nice, key=lambda j: nice[j])

    assert order(FairPolicy(theta=0.0)) == ["3", "1"]
    assert order(FairPolicy(theta=0.0, idle_fill=0.5)) == ["1", "3"]


def test_idle_faster_gpus_take_opted_in_jobs_even_with_nothing_pending() -> None:
    slow = RunningJob("7", "a", "u", "k80", 2, NOW - 3600, NOW + 36_000, relative_speed=0.25,
                      preemptible=True, runtime_s={"k80": 40_000.0, "v100": 10_000.0})
    pools = {"v100": GpuPool("v100", 2, 2), "k80": GpuPool("k80", 4, 2)}
    out = FairPolicy().decide(ClusterState(NOW, pools, [], [slow]))
    assert [(d.job_id, d.requeue, d.gpu_types) for d in out] == [("7", True, ("v100",))]
    assert FairPolicy(migrate_margin=0.0).decide(ClusterState(NOW, pools, [], [slow])) == []


def test_idle_fill_knobs_are_checked() -> None:
    with pytest.raises(PolicyError):
        FairPolicy(idle_fill=-0.1)
    with pytest.raises(PolicyError):
        FairPolicy(fill_speed=1.5)
    with pytest.raises(PolicyError):
        FairPolicy(fill_wait_s=-1.0)
