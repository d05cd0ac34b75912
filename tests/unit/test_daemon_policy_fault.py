"""A policy that raises on a cycle's state: the cycle does nothing, the daemon backs off and goes
on. Before, the exception ended the daemon, and systemd restarted it into the same state."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from slurm_hase.daemon.cycle import CycleConfig, run_cycle
from slurm_hase.daemon.fake import FakeBackend, gpu_node
from slurm_hase.errors import PolicyError
from slurm_hase.policy.types import ClusterState, Decision
from slurm_hase.policy.usage import UsageLedger
from tests.unit.test_daemon_loop import Clock, Est, NiceEverything, make, pjob


class Broken(NiceEverything):
    """Divides by zero while `broken`, else NiceEverything's decisions."""

    broken = True

    def decide(self, state: ClusterState) -> list[Decision]:
        if self.broken:
            return [Decision(j.job_id, nice=1 // (len(state.pending) - len(state.pending)))
                    for j in state.pending]
        return super().decide(state)


def test_run_cycle_turns_a_policy_exception_into_a_policy_error_and_sends_nothing() -> None:
    fb = FakeBackend([pjob("1"), pjob("2")], [gpu_node("a1", "a100")])
    with pytest.raises(PolicyError) as err:
        run_cycle(fb, Broken(), Est(), Clock(), UsageLedger(60.0), {"a": 1.0}, CycleConfig())
    assert str(err.value).startswith("policy 'nice' failed on this cycle's state (2 pending, 0 "
                                     "running jobs): ZeroDivisionError")
    assert "ZeroDivisionError: integer division or modulo by zero" in str(err.value)
    assert fb.updates == []


def test_the_daemon_backs_off_logs_and_decides_again_once_the_policy_works(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    fb = FakeBackend([pjob("1")], [gpu_node("a1", "a100")])
    d, store = make(tmp_path, fb)
    policy = Broken()
    d.policy = policy
    with caplog.at_level(logging.INFO, logger="slurm_hase.daemon"):
        assert d.step() == 2  # backoff_s
        assert d.step() == 4  # further apart
        assert "policy failed; nothing changed this cycle" in caplog.text
        assert "ZeroDivisionError" in caplog.text  # the traceback
        assert "policy failed, backing off" in caplog.text
        assert "unavailable" not in caplog.text
    assert d.failures == 2 and "ZeroDivisionError" in (d.last_failure or "")
    assert d.metrics.get("hase_schedd_errors_total", kind="policy") == 2
    assert d.metrics.get("hase_schedd_errors_total", kind="slurm") == 0
    assert fb.updates == [] and store.owned() == {}
    policy.broken = False
    assert d.step() <= 30
    assert d.failures == 0 and len(fb.updates) == 1
