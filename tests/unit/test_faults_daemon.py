"""Fault audit: the daemon with slurmdbd down, a hung scontrol, and a kill mid-cycle.

The brief: "Faults (slurmctld down, job vanished mid-update, database locked) are survived",
and a daemon killed and restarted loses no state. What the daemon owns (store.owned: the
Nice/Features it set) is state: a job whose attributes it set but does not know it set is
treated as the user's (safety._nice_ours/_features_ours) and never touched again.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hase.daemon.cycle import CycleConfig
from slurm_hase.daemon.fake import FakeBackend, gpu_node
from slurm_hase.daemon.loop import Daemon, LoopSettings
from slurm_hase.errors import SlurmTimeoutError
from slurm_hase.policy.types import ClusterState, Decision
from slurm_hase.slurm.command_backend import classify_failure
from slurm_hase.slurm.runner import CommandResult
from slurm_hase.slurm.types import JobUpdate
from slurm_hase.store.state import StateStore
from tests.unit.test_daemon_cycle import Clock
from tests.unit.test_daemon_loop import Est, pjob

SETTINGS = LoopSettings(interval_s=30, backoff_s=2, backoff_max_s=10, half_life_s=60)


class SetNice:
    """Sets `nice` (and the a100 type) on every pending job; the test changes `nice`."""

    name = "setnice"
    summary = "fixed nice for every pending job"

    def __init__(self, nice: int = 40) -> None:
        self.nice = nice

    def decide(self, state: ClusterState) -> list[Decision]:
        return [Decision(p.job_id, nice=self.nice, gpu_types=("a100",)) for p in state.pending]


def _nices(fb: FakeBackend) -> dict[str, int]:
    return {j.job_id: j.nice for j in fb.job_list}


# -- slurmdbd down ------------------------------------------------------------------------

class SlurmdbdDown(FakeBackend):
    """slurmctld answers; slurmdbd does not, so sacct AND sacctmgr fail (both talk to
    slurmdbd). FakeBackend.accounting_down fails sacct only; sacctmgr's failure is built the way
    CommandBackend builds it from sacctmgr's stderr."""

    def account_shares(self) -> dict[str, float]:
        self._check("sacctmgr")
        raise classify_failure(CommandResult(
            ("sacctmgr", "show", "assoc", "format=account,user,share", "-P", "-n"), 1, "",
            "sacctmgr: error: Sending PersistInit msg: Connection refused\n"
            "sacctmgr: error: Problem talking to the database: Connection refused\n"))


def test_slurmdbd_down_does_not_stop_scheduling_with_shares_from_sacctmgr(
        tmp_path: Path) -> None:
    """With the default config ([shares] empty = ask sacctmgr), Daemon.step evaluates
    self._shares() inside its `except SlurmError` and backs off: while slurmdbd is down the
    daemon schedules nothing at all, although slurmctld answers and the start-up path
    (_seed_ledger) was written to carry on without slurmdbd."""
    fb = SlurmdbdDown([pjob("1"), pjob("2")], [gpu_node("a1", "a100")])
    fb.accounting_down = True
    store = StateStore(tmp_path / "s.db")
    d = Daemon(fb, SetNice(), Est(), Clock(), store, CycleConfig(), SETTINGS)  # no fixed shares
    d.step()
    assert d.failures == 0, "the cycle backed off because sacctmgr (slurmdbd) failed"
    assert sorted(j for j, _ in fb.updates) == ["1", "2"]
    assert len(store.cycles()) == 1


# -- slurmctld lost while acting (a passing guard: removing the handling fails it) ---------

def test_slurmctld_lost_while_acting_is_recorded_and_backed_off(tmp_path: Path) -> None:
    """docs/daemon.md: "remaining updates skipped, cycle recorded with unavailable=1, back-off".
    No unit test checked the Daemon half (dropping loop.py's `if result.unavailable: return
    self._backoff(...)` left the whole unit suite green)."""
    fb = FakeBackend([pjob("1"), pjob("2"), pjob("3")], [gpu_node("a1", "a100")])

    def die(job_id: str) -> None:
        if job_id == "2":
            fb.unavailable = True

    fb.before_update = die
    store = StateStore(tmp_path / "s.db")
    d = Daemon(fb, SetNice(), Est(), Clock(), store, CycleConfig(), SETTINGS, shares={"a": 1.0})
    assert d.step() == 2  # backoff_s, not the 30 s interval
    assert d.failures == 1
    (cyc,) = store.cycles()
    assert cyc["unavailable"] == 1 and cyc["applied"] == 1
    # job 2's update was sent as slurmctld went away: its outcome is unknown, so what it would
    # set stays the daemon's too (job 3's was never sent: not recorded)
    assert store.owned() == {"1": (40, "a100"), "2": (40, "a100")}
    fb.before_update, fb.unavailable = None, False
    d.step()
    assert d.failures == 0 and _nices(fb) == {"1": 40, "2": 40, "3": 40}


# -- a hung scontrol (the runner's timeout) -------------------------------------------------

class HungUpdates(FakeBackend):
    """Every scontrol update hangs until the runner's timeout (SlurmTimeoutError)."""

    def __init__(self, *a: object, **kw: object) -> None:
        super().__init__(*a, **kw)  # type: ignore[arg-type]
        self.attempts: list[str] = []

    def update_job(self, job_id: str, update: JobUpdate) -> None:
        self.attempts.append(job_id)
        raise SlurmTimeoutError(["scontrol", "update", f"jobid={job_id}"], 60.0)


def test_a_hung_scontrol_stops_the_acting_like_an_unreachable_one() -> None:
    """A timeout while acting is counted per job ("error") and the next update is tried, each
    waiting the runner's full timeout (60 s): 300 planned updates under a hung slurmctld hold
    one cycle for 5 hours, during which SIGTERM (checked between cycles) is not honoured, so
    systemd's stop ends in SIGKILL mid-cycle. An unreachable slurmctld stops the acting at its
    first failure (act.apply_updates' `down`); a hung one should too."""
    from slurm_hase.daemon.cycle import run_cycle
    from slurm_hase.policy.usage import UsageLedger

    fb = HungUpdates([pjob(str(i)) for i in range(1, 11)], [gpu_node("a1", "a100")])
    res = run_cycle(fb, SetNice(), Est(), Clock(), UsageLedger(60.0), {}, CycleConfig())
    assert len(res.planned) == 10
    assert len(fb.attempts) == 1, f"{len(fb.attempts)} scontrol calls waited out the timeout"
    assert res.unavailable


class TimeoutAfterLanding(FakeBackend):
    """scontrol update that reached slurmctld, which applied it, but whose answer came too late
    (the runner killed scontrol at its timeout): the change is in Slurm, the daemon got an
    error."""

    def __init__(self, *a: object, **kw: object) -> None:
        super().__init__(*a, **kw)  # type: ignore[arg-type]
        self.late: set[str] = set()

    def update_job(self, job_id: str, update: JobUpdate) -> None:
        super().update_job(job_id, update)
        if job_id in self.late:
            self.late.discard(job_id)
            raise SlurmTimeoutError(["scontrol", "update", f"jobid={job_id}"], 60.0)


def test_an_update_that_timed_out_but_landed_is_still_ours_next_cycle(tmp_path: Path) -> None:
    """The timed-out update is an "error" and not recorded as owned, so from the next cycle on
    the Nice/Features the daemon itself set read as the user's and the job is never re-ordered
    again (plan_updates: "nice 40 set by the user; left alone")."""
    fb = TimeoutAfterLanding([pjob("1"), pjob("2")], [gpu_node("a1", "a100")])
    fb.late = {"1"}
    policy = SetNice(40)
    store = StateStore(tmp_path / "s.db")
    d = Daemon(fb, policy, Est(), Clock(), store, CycleConfig(refresh_s=0.0), SETTINGS,
               shares={"a": 1.0})
    d.step()
    # job 1's update landed but timed out: the acting stops there (a hung slurmctld, as an
    # unreachable one), job 2 waits for the next cycle
    assert _nices(fb) == {"1": 40, "2": 0} and d.failures == 1
    policy.nice = 20  # the order moves on
    d.step()
    skipped = dict(d.last_result.skipped) if d.last_result else {}
    assert _nices(fb) == {"1": 20, "2": 20}, f"job 1 left alone: {skipped.get('1')}"


# -- killed mid-cycle, restarted --------------------------------------------------------------

class Killed(BaseException):
    """Stands for SIGKILL (or systemd's stop timeout): nothing after it runs in the process."""


def test_killed_while_acting_then_restarted_still_owns_what_it_set(tmp_path: Path) -> None:
    """Updates are applied to Slurm first and recorded (with the ownership rows) only after the
    whole cycle. A kill in between (an apply phase of hundreds of scontrol calls lasts seconds
    to minutes) leaves Slurm changed and the store unaware: after the restart the daemon takes
    its own Nice/Features for the user's and leaves those jobs alone for good."""
    path = tmp_path / "s.db"
    fb = FakeBackend([pjob("1"), pjob("2"), pjob("3")], [gpu_node("a1", "a100")])

    def die_before_third(job_id: str) -> None:
        if job_id == "3":
            raise Killed

    fb.before_update = die_before_third
    store = StateStore(path)
    d = Daemon(fb, SetNice(40), Est(), Clock(), store, CycleConfig(), SETTINGS,
               shares={"a": 1.0})
    with pytest.raises(Killed):
        d.step()
    store.close()  # the process is gone
    assert _nices(fb) == {"1": 40, "2": 40, "3": 0}  # Slurm kept what was applied

    fb.before_update = None
    policy = SetNice(20)
    store2 = StateStore(path)
    d2 = Daemon(fb, policy, Est(), Clock(), store2, CycleConfig(), SETTINGS, shares={"a": 1.0})
    d2.step()
    skipped = dict(d2.last_result.skipped) if d2.last_result else {}
    assert _nices(fb) == {"1": 20, "2": 20, "3": 20}, (
        f"after the restart: job 1 {skipped.get('1')!r}, job 2 {skipped.get('2')!r}")
    assert set(store2.owned()) == {"1", "2", "3"}


# -- a dry run beside the daemon (the store's other writer) -----------------------------------

def test_a_dry_run_with_other_partitions_keeps_the_daemons_ownership(tmp_path: Path) -> None:
    """`hase schedd run --dry-run` may run beside the daemon on its store (StoreLock's message:
    "or use --dry-run, which changes nothing") and writes to it. Daemon._record forgets every
    owned job not pending in *its* managed partitions, so a dry run trying a config for other
    partitions deletes the running daemon's ownership rows; after the daemon's next restart its
    own Nice/Features read as the user's."""
    path = tmp_path / "s.db"
    fb = FakeBackend([pjob("1"), pjob("2")], [gpu_node("a1", "a100"),
                                              gpu_node("d1", "a100", partition="debug")])
    store = StateStore(path)
    real = Daemon(fb, SetNice(40), Est(), Clock(), store, CycleConfig(partitions=("gpu",)),
                  SETTINGS, shares={"a": 1.0})
    real.step()
    assert set(store.owned()) == {"1", "2"}
    look = Daemon(fb, SetNice(40), Est(), Clock(), StateStore(path),
                  CycleConfig(dry_run=True, partitions=("debug",)), SETTINGS, shares={"a": 1.0})
    look.step()
    assert fb.updates == [("1", JobUpdate(nice=40, features="a100")),
                          ("2", JobUpdate(nice=40, features="a100"))]  # nothing more in Slurm
    assert set(store.owned()) == {"1", "2"}, "the dry run deleted the daemon's ownership rows"


def test_no_requeue_is_tried_once_slurmctld_went_away_during_the_updates() -> None:
    """cycle.run_cycle skips the requeues after an unavailable update (`and not
    result.unavailable`); no unit test noticed that guard gone (a flapping slurmctld would then
    get a requeue, a running job's restart, from a cycle that was cut short)."""
    from slurm_hase.daemon.cycle import run_cycle
    from slurm_hase.policy.usage import UsageLedger
    from tests.unit.test_daemon_requeue import Clock as RqClock
    from tests.unit.test_daemon_requeue import Est as RqEst
    from tests.unit.test_daemon_requeue import Scripted, nodes, running

    class Flapping(FakeBackend):
        """Down for the one update, back right after (a restart between two calls)."""

        def update_job(self, job_id: str, update: JobUpdate) -> None:
            self.unavailable = True
            try:
                super().update_job(job_id, update)
            finally:
                self.unavailable = False

    fb = Flapping([pjob("p"), running("1")], nodes())
    decisions = [Decision("p", nice=5), Decision("1", requeue=True)]
    res = run_cycle(fb, Scripted(decisions), RqEst(), RqClock(), UsageLedger(3600.0), {},
                    CycleConfig(requeue=True))
    assert res.unavailable
    assert fb.requeued == [] and res.requeued == []
