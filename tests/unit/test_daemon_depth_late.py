"""SchedulerParameters unreadable at start (slurmctld still starting when the unit starts at
boot: After=slurmctld.service only orders the starts): the daemon asks again once cycles
complete. Before, Slurm's defaults (500) stood until a restart, so a site with bf_max_job_test
= 5000 was decided for as if slurmctld looked ten times less deep."""

from __future__ import annotations

from pathlib import Path

from slurm_hase.daemon.cycle import CycleConfig
from slurm_hase.daemon.fake import FakeBackend, gpu_node
from slurm_hase.daemon.loop import Daemon, LoopSettings
from slurm_hase.slurm.types import SchedulerDepths
from slurm_hase.store.state import StateStore
from tests.unit.test_daemon_cycle import Clock
from tests.unit.test_daemon_loop import Est, SeesDepth, pjob


class Ticks:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_scheduler_depth_unread_at_start_is_read_once_slurmctld_answers(tmp_path: Path) -> None:
    fb = FakeBackend([pjob("1")], [gpu_node("a1", "a100")])
    fb.depths = SchedulerDepths(backfill=5000, main=250)
    fb.unavailable = True  # slurmctld not up yet
    pol, ticks = SeesDepth(), Ticks()
    d = Daemon(fb, pol, Est(), Clock(), StateStore(tmp_path / "s.db"), CycleConfig(),
               LoopSettings(interval_s=30, half_life_s=60), shares={"a": 1.0}, monotonic=ticks)
    assert d.config.scheduler_depth == 500
    d.step()  # still down: backs off, nothing read
    fb.unavailable = False
    d.step()  # the first cycle that completes: decided with the defaults, then read
    assert d.config.scheduler_depth == 5000
    ticks.t += 30
    d.step()  # decides again (not quiet), with the depth slurmctld has
    assert pol.seen == [500, 5000]


def test_a_depth_read_at_start_is_not_asked_again(tmp_path: Path) -> None:
    fb = FakeBackend([pjob("1")], [gpu_node("a1", "a100")])
    d = Daemon(fb, SeesDepth(), Est(), Clock(), StateStore(tmp_path / "s.db"), CycleConfig(),
               LoopSettings(interval_s=30, half_life_s=60), shares={"a": 1.0})
    asked = []
    fb.scheduler_depths = lambda: asked.append(1) or SchedulerDepths()  # type: ignore[method-assign]
    d.step()
    d.step()
    assert asked == []
