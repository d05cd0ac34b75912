"""One daemon per state store: the lock, its release when the holder dies, and the CLI's
refusals (`schedd run` and `schedd reset` while a daemon runs; dry runs may look on)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_hase.cli import schedd_cmd
from slurm_hase.cli.main import cli
from slurm_hase.daemon.fake import FakeBackend
from slurm_hase.errors import DaemonRunningError
from slurm_hase.slurm.types import Job, JobState
from slurm_hase.store.lock import StoreLock, holder, lock_path
from slurm_hase.store.state import CycleRow, StateStore
from tests.conftest import run_main


def test_second_holder_is_refused_with_the_first_ones_pid(tmp_path: Path) -> None:
    db = tmp_path / "state" / "s.db"
    assert holder(db) is None  # no daemon has run here
    first = StoreLock(db)
    assert lock_path(db).read_text() == f"{os.getpid()}\n"
    assert holder(db) == os.getpid()
    with pytest.raises(DaemonRunningError, match=rf"another hase schedd \(pid {os.getpid()}\) "
                                                  rf"is running on {db} .*--dry-run"):
        StoreLock(db)
    first.close()
    assert holder(db) is None  # the file stays; nobody holds it
    with StoreLock(db):
        assert holder(db) == os.getpid()
    assert holder(db) is None


def test_a_killed_holder_leaves_no_stale_lock(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    child = subprocess.Popen(  # noqa: S603 - argv list
        [sys.executable, "-c", "import sys, time\nfrom slurm_hase.store.lock import StoreLock\n"
         f"lock = StoreLock({str(db)!r})\nprint('held', flush=True)\ntime.sleep(60)\n"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "held\n"
        assert holder(db) == child.pid
        with pytest.raises(DaemonRunningError, match=f"pid {child.pid}"):
            StoreLock(db)
    finally:
        child.kill()
        child.wait()
    deadline = time.monotonic() + 10
    while holder(db) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert holder(db) is None
    StoreLock(db).close()  # SIGKILL, no cleanup: the kernel released it


def _config(tmp_path: Path) -> Path:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[schedd]\nlog_format = "text"\nlog_level = "ERROR"\n')
    return cfg


def test_run_refuses_while_a_daemon_holds_the_store_and_a_dry_run_looks_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("SLURM_CONF", raising=False)
    db, cfg = tmp_path / "s.db", _config(tmp_path)
    backend = FakeBackend([Job(job_id="1", name="j", user="u", account="a", partition="gpu",
                               state=JobState.PENDING)])
    monkeypatch.setattr(schedd_cmd, "_backend", lambda: backend)
    with StoreLock(db):
        code, out, err = run_main(["schedd", "run", "--once", "--config", str(cfg),
                                   "--state-db", str(db)], capsys)
        assert code == 3 and out == ""
        assert err.startswith(f"hase: error: another hase schedd (pid {os.getpid()}) is running "
                              f"on {db}")
        assert backend.calls == 0 and not db.exists()  # refused before Slurm or the store
        dry = CliRunner().invoke(cli, ["schedd", "run", "--once", "--dry-run", "--config",
                                       str(cfg), "--state-db", str(db)])
        assert dry.exit_code == 0, dry.output
        assert backend.updates == []
    real = CliRunner().invoke(cli, ["schedd", "run", "--once", "--config", str(cfg),
                                    "--state-db", str(db)])
    assert real.exit_code == 0, real.output
    assert holder(db) is None  # released when the command ended


def test_reset_refuses_while_a_daemon_runs_and_dry_run_still_lists(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_CONF", raising=False)
    db = tmp_path / "s.db"
    st = StateStore(db)
    st.record_cycle(CycleRow(5.0, 0.2, "fair", False, "d", 1, 1, 1, 1, 0, 0), [],
                    {"9": (-50, "a100")})
    st.close()
    backend = FakeBackend([Job(job_id="9", name="j", user="u", account="a", partition="gpu",
                               state=JobState.PENDING, nice=-50, features="a100")])
    monkeypatch.setattr(schedd_cmd, "_backend", lambda: backend)
    with StoreLock(db):
        out = CliRunner().invoke(cli, ["schedd", "reset", "--state-db", str(db)])
        assert isinstance(out.exception, DaemonRunningError)
        assert backend.updates == []
        listed = CliRunner().invoke(cli, ["schedd", "reset", "--dry-run", "--state-db", str(db)])
        assert listed.exit_code == 0 and (
            "would run: scontrol update jobid=9 Nice=0 Features=\n" in listed.output)
    done = CliRunner().invoke(cli, ["schedd", "reset", "--state-db", str(db)])
    assert done.exit_code == 0, done.output
    assert "9: reset" in done.output and backend.updates


def test_status_says_whether_a_daemon_runs_on_the_store(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    StateStore(db).close()
    for held in (False, True):
        lock = StoreLock(db) if held else None
        text = CliRunner().invoke(cli, ["schedd", "status", "--state-db", str(db)])
        data = json.loads(CliRunner().invoke(
            cli, ["schedd", "status", "--json", "--state-db", str(db)]).stdout)
        if lock is not None:
            lock.close()
        line = text.stdout.splitlines()[1]
        if held:
            assert line == f"daemon: running (pid {os.getpid()})"
            assert data["daemon_pid"] == os.getpid()
        else:
            assert line == "daemon: not running on this store" and data["daemon_pid"] is None


def test_an_in_memory_store_holds_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with StoreLock(":memory:"), StoreLock(":memory:"):  # each process has its own
        assert holder(":memory:") is None
    assert list(tmp_path.iterdir()) == []  # no ":memory:.lock" left in the working folder


def test_a_symlink_to_the_store_shares_its_lock(tmp_path: Path) -> None:
    """--state-db through a link named its own lock file beside the link: two daemons ran on
    one store."""
    db = tmp_path / "real.db"
    db.touch()
    link = tmp_path / "link.db"
    link.symlink_to(db)
    with StoreLock(db):
        with pytest.raises(DaemonRunningError):
            StoreLock(link)
        assert holder(link) == os.getpid()
    assert lock_path(link) == lock_path(db)
