"""`hase schedd run` and SIGHUP: the config is read again and the daemon goes on. Before, the
daemon had no SIGHUP handler: `kill -HUP` (the usual "reload your config") ended it at once,
without writing the store's backlog, and systemd (Restart=on-failure counts SIGHUP as a clean
stop) did not start it again."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from slurm_hase.cli import schedd_cmd
from slurm_hase.cli.schedd_run import reload_daemon
from slurm_hase.daemon.config import from_mapping
from slurm_hase.daemon.fake import FakeBackend, gpu_node
from slurm_hase.daemon.loop import Daemon
from slurm_hase.daemon.metrics import Metrics
from slurm_hase.errors import ConfigError
from slurm_hase.slurm.types import GpuRequest, Job, JobState
from slurm_hase.store.state import StateStore
from tests.conftest import run_main

Capsys = pytest.CaptureFixture[str]
COMMENT = '{"hase":1,"model":"resnet50","bs":64,"iters":20000}'
BASE = ('[schedd]\nlog_format = "text"\nlog_level = "WARNING"\ninterval_s = 1\n'
        "backoff_s = 0.1\nbackoff_max_s = 0.1\n")


class HangUp(Exception):
    """What SIGHUP does to a process that has no handler for it: it ends."""


@pytest.fixture
def signals() -> Iterator[None]:
    """SIGHUP ends the test (as it would end the daemon) unless `schedd run` handles it; every
    handler is put back afterwards."""
    sigs = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    saved = {s: signal.getsignal(s) for s in sigs}

    def hang_up(_signum: int, _frame: object) -> None:
        raise HangUp

    signal.signal(signal.SIGHUP, hang_up)
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


class Scripted(FakeBackend):
    """One pending job; at the squeue calls of `script`, its action (write the config, send a
    signal) runs."""

    def __init__(self, script: dict[int, Callable[[], None]]) -> None:
        super().__init__(
            [Job(job_id="7", name="train", user="u", account="teama", partition="gpu",
                 state=JobState.PENDING, gpu=GpuRequest(1, None, "job"), comment=COMMENT,
                 submit_time=1_000, time_limit_s=36_000)],
            [gpu_node("a1", "a100"), gpu_node("t1", "t4")], shares={"teama": 1.0})
        self.script, self.squeue_calls = script, 0

    def jobs(self) -> list[Job]:
        self.squeue_calls += 1
        self.script.get(self.squeue_calls, lambda: None)()
        return super().jobs()


def _kill(sig: signal.Signals) -> Callable[[], None]:
    return lambda: os.kill(os.getpid(), sig)


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Capsys, new_config: str
         ) -> tuple[int, str, list[str], Scripted]:
    """Start with policy fair, write `new_config` and send SIGHUP in cycle 2, SIGTERM in 3."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(BASE)

    def hup() -> None:
        cfg.write_text(new_config)
        os.kill(os.getpid(), signal.SIGHUP)

    monkeypatch.delenv("SLURM_CONF", raising=False)
    backend = Scripted({2: hup, 3: _kill(signal.SIGTERM)})
    monkeypatch.setattr(schedd_cmd, "_backend", lambda: backend)
    db = tmp_path / "s.db"
    code, _, err = run_main(["schedd", "run", "--config", str(cfg), "--state-db", str(db)],
                            capsys)
    policies = [c["policy"] for c in reversed(StateStore(db).cycles(10))]
    return code, err, policies, backend


def test_sighup_reloads_the_config_and_the_daemon_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Capsys, signals: None) -> None:
    code, err, policies, backend = _run(tmp_path, monkeypatch, capsys,
                                        BASE + '[policy]\nname = "hase"\n')
    assert code == 0, err
    assert backend.squeue_calls == 3
    # cycle 2 found nothing changed (quiet, no row); after the reload cycle 3 decides, under
    # the new policy
    assert policies == ["fair", "hase"], err


def test_a_bad_config_on_reload_names_the_key_and_the_running_one_stays(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Capsys, signals: None) -> None:
    code, err, policies, backend = _run(tmp_path, monkeypatch, capsys,
                                        BASE + "intervl_s = 5\n[policy]\nname = \"hase\"\n")
    assert code == 0, err
    assert backend.squeue_calls == 3
    assert "config reload failed" in err and "intervl_s" in err, err
    assert policies == ["fair"]  # the running config stays: cycle 3 is quiet under it


def _daemon(tmp_path: Path, metrics: Metrics) -> Daemon:
    from slurm_hase.cli.schedd_run import daemon_settings
    from slurm_hase.daemon.cycle import JobEstimate
    from slurm_hase.daemon.loop import WallClock
    from slurm_hase.policy.registry import make_policy

    cycle, settings = daemon_settings(from_mapping({}))
    return Daemon(FakeBackend(), make_policy("fair"), lambda job, types: JobEstimate({}),
                  WallClock(), StateStore(tmp_path / "s.db"), cycle, settings, metrics=metrics)


def test_what_needs_a_restart_is_kept_and_said(tmp_path: Path,
                                               caplog: pytest.LogCaptureFixture) -> None:
    metrics = Metrics()
    daemon = _daemon(tmp_path, metrics)
    running = from_mapping({"schedd": {"state_db": str(tmp_path / "s.db")}})
    new = from_mapping({"schedd": {"state_db": "/elsewhere.db", "interval_s": 7,
                                   "half_life_s": 3600}, "policy": {"name": "gavel"}})
    now = reload_daemon(daemon, running, lambda: new)
    assert now.state_db == running.state_db and now.interval_s == 7
    assert daemon.policy.name == "gavel" and daemon.settings.interval_s == 7
    assert daemon.settings.half_life_s == running.half_life_s  # the ledger's stays
    assert "only a restart applies state_db, half_life_s" in caplog.text

    def broken() -> Any:
        raise ConfigError("[schedd] unknown key(s): intervl_s")

    assert reload_daemon(daemon, now, broken) is now
    assert daemon.policy.name == "gavel"
    assert 'hase_schedd_errors_total{kind="config"} 1' in metrics.render()


def test_the_unit_reloads_with_sighup() -> None:
    from slurm_hase.daemon.unit import render_unit

    text = render_unit(config_path="/etc/slurm-hase/schedd.toml", exec_start="/usr/bin/hase")
    assert "ExecReload=/bin/kill -HUP $MAINPID\n" in text


def test_a_reload_reads_the_default_config_the_start_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Capsys, signals: None) -> None:
    """Started without --config, the daemon read DEFAULT_CONFIG; that file gone (a package
    upgrade moving it, an edit through a temporary rename) must not turn a reload into the
    built-in defaults (another policy, all partitions), but a reload error."""
    default = tmp_path / "schedd.toml"
    default.write_text(BASE + '[policy]\nname = "hase"\n')
    monkeypatch.setattr(schedd_cmd, "DEFAULT_CONFIG", str(default))

    def hup() -> None:
        default.unlink()
        os.kill(os.getpid(), signal.SIGHUP)

    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.delenv("HASE_SCHEDD_CONFIG", raising=False)
    backend = Scripted({2: hup, 3: _kill(signal.SIGTERM)})
    monkeypatch.setattr(schedd_cmd, "_backend", lambda: backend)
    db = tmp_path / "s.db"
    code, _, err = run_main(["schedd", "run", "--state-db", str(db)], capsys)
    assert code == 0, err
    assert "config reload failed" in err and str(default) in err, err
    assert [c["policy"] for c in StateStore(db).cycles(10)] == ["hase"]
