"""sticky_order: past a position, jobs that hold a level keep the order of their levels."""

from __future__ import annotations

from dataclasses import replace

from slurm_hase.policy.common import NICE_MAX
from slurm_hase.policy.fair import FairPolicy
from slurm_hase.policy.order import sticky_order
from slurm_hase.policy.types import ClusterState, GpuPool, PendingJob


def pj(jid: str, nice: int = NICE_MAX, acct: str = "a") -> PendingJob:
    return PendingJob(jid, acct, "u", 0.0, 1, {"v100": 100.0}, nice=nice)


def ids(jobs: list[PendingJob]) -> list[str]:
    return [j.job_id for j in jobs]


def test_held_jobs_past_start_follow_their_levels_and_new_ones_ride_behind() -> None:
    order = [pj("h0", 0), pj("h1", 10),  # before `start`: untouched
             pj("x", 50), pj("new1"), pj("y", 30), pj("z", 40), pj("new2"), pj("w", 20),
             pj("tail", 60)]  # past `end`: untouched
    out = sticky_order(order, 2, 8, set(), NICE_MAX - 30)
    # held: x 50, y 30, z 40, w 20 -> w, y, z, x; new1 rides behind x, new2 behind z
    assert ids(out) == ["h0", "h1", "w", "y", "z", "new2", "x", "new1", "tail"]
    assert sorted(ids(out)) == sorted(ids(order))


def test_jobs_before_every_held_one_lead_and_moving_jobs_keep_their_place() -> None:
    order = [pj("new0"), pj("a", 40), pj("s", 10), pj("b", 20)]
    # s is starting now: it is not held, so it rides behind a instead of jumping to its level
    assert ids(sticky_order(order, 0, 4, {"s"}, NICE_MAX - 30)) == ["new0", "b", "a", "s"]
    assert ids(sticky_order(order, 0, 4, set(), NICE_MAX - 30)) == ["new0", "s", "b", "a"]
    # fewer than two held jobs: nothing to keep
    assert ids(sticky_order(order, 3, 4, set(), NICE_MAX - 30)) == ids(order)


def test_fair_with_sticky_levels_renumbers_fewer_jobs_as_tags_drift() -> None:
    pools = {"v100": GpuPool("v100", 2, 0)}
    pend = [PendingJob(str(i), "ab"[i % 2], "u", float(i), 1, {"v100": 1000.0 + 10 * i})
            for i in range(40)]

    def renumbered(policy: FairPolicy) -> int:
        jobs = pend
        first = policy.decide(ClusterState(0.0, pools, jobs, [], usage={"a": 0.0}))
        nice = {d.job_id: d.nice for d in first if d.nice is not None}
        jobs = [replace(j, nice=nice.get(j.job_id, j.nice)) for j in jobs]
        # account a got 5,000 GPU-s of service since: its jobs move back in the fair order
        again = policy.decide(ClusterState(60.0, pools, jobs, [], usage={"a": 5000.0}))
        return sum(1 for d in again if d.nice is not None)

    exact, sticky = renumbered(FairPolicy()), renumbered(FairPolicy(sticky_from=4))
    assert exact > 0 and sticky < exact
