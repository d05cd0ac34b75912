"""The back-off warning says what failed: a Slurm that answers wrongly is not an unreachable one.
Before, every failed cycle logged "slurm unavailable, backing off", a squeue whose output could
not be parsed (a Slurm upgrade) too, sending the admin to look at a slurmctld that was up."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from slurm_hase.daemon.fake import FakeBackend, gpu_node
from slurm_hase.errors import SlurmParseError
from slurm_hase.slurm.types import Job
from tests.unit.test_daemon_loop import make, pjob


class Garbled(FakeBackend):
    """squeue answers, but with output the parser refuses."""

    garbled = True

    def jobs(self) -> list[Job]:
        if self.garbled:
            raise SlurmParseError("squeue --json", "expected an object with 'jobs'")
        return super().jobs()


def test_a_parse_error_is_not_logged_as_slurm_unavailable(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    fb = Garbled([pjob("1")], [gpu_node("a1", "a100")])
    d, _ = make(tmp_path, fb)
    with caplog.at_level(logging.INFO, logger="slurm_hase.daemon"):
        assert d.step() == 2  # backs off all the same
        assert "slurm command failed, backing off" in caplog.text
        assert "unavailable" not in caplog.text
        assert "expected an object with 'jobs'" in caplog.records[-1].__dict__["reason"]
        fb.garbled = False
        d.step()
    assert "cycles complete again after 1 failed cycles" in caplog.text
    assert d.metrics.get("hase_schedd_errors_total", kind="slurm") == 1


def test_slurmctld_away_is_still_said_so(tmp_path: Path,
                                         caplog: pytest.LogCaptureFixture) -> None:
    fb = FakeBackend([pjob("1")], [gpu_node("a1", "a100")])
    d, _ = make(tmp_path, fb)
    fb.unavailable = True
    with caplog.at_level(logging.WARNING, logger="slurm_hase.daemon"):
        d.step()
    assert "slurm unavailable, backing off" in caplog.text
