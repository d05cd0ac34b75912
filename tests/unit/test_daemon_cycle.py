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
    jobs, nodes, outside = observe(fb, CycleConfig(partitions=("gpu",)))
    assert [j.job_id for j in jobs] == ["1"]
    assert [j.job_id for j in outside] == ["2", "3"]  # pending, not (only) in managed ones
    assert sorted(n.name for n in nodes) == ["a1", "t1", "v1"]
    jobs, _, outside = observe(fb, CycleConfig())
    assert len(jobs) == 3 and outside == []


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
