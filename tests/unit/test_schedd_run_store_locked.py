"""`hase schedd run` starting while another process holds the state store's write lock."""

from __future__ import annotations

import sqlite3
from functools import partial
from pathlib import Path

import pytest

from slurm_hase.cli import schedd_cmd
from slurm_hase.daemon.fake import FakeBackend, gpu_node
from slurm_hase.slurm.types import Job
from slurm_hase.store import state as state_module
from slurm_hase.store.state import StateStore
from tests.conftest import run_main


class LockGoesWhileObserving(FakeBackend):
    """The other writer (a backup, an admin's sqlite3 shell) lets go during the first cycle."""

    def __init__(self, other: sqlite3.Connection) -> None:
        super().__init__([], [gpu_node("v1", "v100")], shares={"a": 1.0})
        self.other = other

    def jobs(self) -> list[Job]:
        if self.other.in_transaction:
            self.other.execute("ROLLBACK")
        return super().jobs()


def test_a_store_locked_at_start_delays_the_model_record_instead_of_stopping_the_daemon(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The model row written at start was the one store write not kept for retry: a store
    locked by another process for longer than the lock retries made `hase schedd run` exit
    with `state store ... is locked` before its first cycle (and `writes lost at close`),
    where the docs promise that a locked store delays writes and the cycles go on."""
    db = tmp_path / "s.db"
    StateStore(db).close()
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    other.execute("DELETE FROM usage_snapshots")
    backend = LockGoesWhileObserving(other)
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.setattr(schedd_cmd, "_backend", lambda: backend)
    # the real store, with short lock retries (the defaults wait about 8 s)
    monkeypatch.setattr(state_module, "StateStore", partial(
        StateStore, lock_timeout_s=0.01, attempts=2, backoff_s=0.0, sleep=lambda s: None))
    cfg = tmp_path / "c.toml"
    cfg.write_text('[schedd]\nlog_format = "text"\nlog_level = "ERROR"\n[shares]\na = 1.0\n')
    code, out, err = run_main(["schedd", "run", "--once", "--config", str(cfg),
                               "--state-db", str(db)], capsys)
    other.close()
    assert code == 0, err
    assert "# policy fair: 0 updates for 0 pending jobs" in out
    store = StateStore(db)
    model = store.latest_model()
    assert model is not None and model["path"] == "(bundled)"  # written once the lock went
    assert len(store.cycles()) == 1
