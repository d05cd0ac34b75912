"""Quiet cycles: with CycleConfig.refresh_s and a QuietWatch, a cycle that observes the same
job set and nodes as the last deciding cycle decides nothing until refresh_s has passed."""

from __future__ import annotations

from dataclasses import replace

from slurm_hase.daemon.cycle import CycleConfig, CycleResult, QuietWatch, run_cycle
from slurm_hase.daemon.fake import FakeBackend, gpu_node
from slurm_hase.errors import SlurmCommandError
from slurm_hase.policy.types import Decision
from slurm_hase.policy.usage import UsageLedger
from slurm_hase.slurm.types import JobState
from tests.unit.test_daemon_cycle import Clock, Scripted, TableEstimator, pjob, rjob

NODES = [gpu_node("a1", "a100", alloc=1), gpu_node("v1", "v100")]


def cycle(fb: FakeBackend, pol: Scripted, clock: Clock, watch: QuietWatch | None,
          refresh_s: float = 600.0, ledger: UsageLedger | None = None) -> CycleResult:
    return run_cycle(fb, pol, TableEstimator(), clock, ledger or UsageLedger(3600.0),
                     {"a": 1.0}, CycleConfig(refresh_s=refresh_s), watch=watch)


def test_unchanged_job_set_is_quiet_until_refresh() -> None:
    fb = FakeBackend([pjob("1"), pjob("2"), rjob("9", "a100")], NODES)
    pol, clock, watch = Scripted([Decision("1", nice=50)]), Clock(1000.0), QuietWatch()
    first = cycle(fb, pol, clock, watch)
    assert not first.quiet and len(pol.seen) == 1 and fb.updates
    for t in (1060.0, 1300.0, 1599.0):  # our own Nice update is not a change
        clock.t = t
        res = cycle(fb, pol, clock, watch)
        assert res.quiet and res.decisions == [] and res.planned == []
    assert len(pol.seen) == 1
    clock.t = 1600.0  # refresh_s after the last deciding cycle
    assert not cycle(fb, pol, clock, watch).quiet and len(pol.seen) == 2
    clock.t = 1660.0
    assert cycle(fb, pol, clock, watch).quiet


def test_any_job_or_node_change_decides() -> None:
    fb = FakeBackend([pjob("1"), pjob("2"), rjob("9", "a100")], NODES)
    pol, clock, watch = Scripted(), Clock(1000.0), QuietWatch()
    cycle(fb, pol, clock, watch)
    changes = [
        lambda: fb.job_list.append(pjob("3")),  # submitted
        lambda: fb.cancel("2"),  # gone
        lambda: fb.job_list.__setitem__(0, replace(fb.job_list[0], state=JobState.RUNNING)),
        lambda: fb.job_list.__setitem__(0, replace(fb.job_list[0], held=True)),
        lambda: fb.requeue("9"),
        lambda: fb.node_list.__setitem__(1, replace(fb.node_list[1], state="DOWN")),
    ]
    for k, change in enumerate(changes):
        change()
        clock.t += 60.0
        assert not cycle(fb, pol, clock, watch).quiet, k
        assert len(pol.seen) == k + 2
        clock.t += 60.0
        assert cycle(fb, pol, clock, watch).quiet, k


def test_without_watch_or_refresh_every_cycle_decides() -> None:
    fb = FakeBackend([pjob("1")], NODES)
    pol, clock = Scripted(), Clock(1000.0)
    for t in (1000.0, 1060.0):
        clock.t = t
        assert not cycle(fb, pol, clock, None).quiet
    watch = QuietWatch()
    for t in (1120.0, 1180.0):
        clock.t = t
        assert not cycle(fb, pol, clock, watch, refresh_s=0.0).quiet
    assert len(pol.seen) == 4


def test_a_cycle_with_failed_updates_is_no_baseline() -> None:
    fb = FakeBackend([pjob("1"), pjob("2")], NODES)
    fb.fail_updates["1"] = SlurmCommandError(["scontrol"], 1, "Invalid feature specification")
    pol, clock, watch = Scripted([Decision("1", nice=3)]), Clock(1000.0), QuietWatch()
    assert cycle(fb, pol, clock, watch).errors
    clock.t = 1060.0
    res = cycle(fb, pol, clock, watch)  # the same job set, but the last cycle fell short
    assert not res.quiet and res.errors
    del fb.fail_updates["1"]
    clock.t = 1120.0
    assert [j for j, _ in cycle(fb, pol, clock, watch).applied] == ["1"]
    clock.t = 1180.0
    assert cycle(fb, pol, clock, watch).quiet


def test_ledger_after_quiet_cycles_matches_every_cycle_deciding() -> None:
    """Skipping the ledger's observation while the running set is unchanged loses nothing."""
    jobs = [pjob("1"), rjob("8", "a100", account="b"), rjob("9", "v100", account="c")]
    quiet_l, busy_l = UsageLedger(3600.0), UsageLedger(3600.0)
    for ledger, refresh in ((quiet_l, 10_000.0), (busy_l, 0.0)):
        fb, pol, clock, watch = FakeBackend(jobs, NODES), Scripted(), Clock(1000.0), QuietWatch()
        for t in range(1000, 5000, 60):
            clock.t = float(t)
            cycle(fb, pol, clock, watch, refresh_s=refresh, ledger=ledger)
        clock.t = 5000.0
        fb.cancel("8")  # a change: both decide and observe now
        assert not cycle(fb, pol, clock, watch, refresh_s=refresh, ledger=ledger).quiet
    assert quiet_l.usage().keys() == busy_l.usage().keys() == {"b", "c"}
    for acct, used in busy_l.usage().items():
        assert abs(quiet_l.usage()[acct] - used) <= 1e-9 * used


def test_squeue_order_does_not_matter_but_every_field_does() -> None:
    """A real backend parses new Job objects each time, in an order that follows priority."""
    fb = FakeBackend([pjob("1"), pjob("2", nice=5), rjob("9", "a100")], NODES)
    pol, clock, watch = Scripted(), Clock(1000.0), QuietWatch()
    cycle(fb, pol, clock, watch)
    fb.job_list = [replace(j) for j in reversed(fb.job_list)]  # new objects, new order
    fb.job_list[1] = replace(fb.job_list[1], nice=40, features="a100")  # as we would set them
    clock.t += 60.0
    assert cycle(fb, pol, clock, watch).quiet
    fb.job_list = [replace(j) for j in fb.job_list]  # same order, new objects
    clock.t += 60.0
    assert cycle(fb, pol, clock, watch).quiet
    for change in ({"restarts": 1}, {"partition": "other,gpu"}, {"held": True}):
        before = list(fb.job_list)
        fb.job_list = list(reversed(before))
        fb.job_list[0] = replace(fb.job_list[0], **change)  # type: ignore[arg-type]
        clock.t += 60.0
        assert not cycle(fb, pol, clock, watch).quiet, change
    clock.t += 60.0
    assert cycle(fb, pol, clock, watch).quiet
    k = next(i for i, j in enumerate(fb.job_list) if j.state is JobState.PENDING)
    fb.job_list[k] = replace(fb.job_list[k], state=JobState.RUNNING)  # same order: one differs
    clock.t += 60.0
    assert not cycle(fb, pol, clock, watch).quiet
