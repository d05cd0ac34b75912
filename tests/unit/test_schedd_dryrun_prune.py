"""A dry run beside the running daemon prunes none of the shared store's history. Before, it
pruned by its own history_days: `hase schedd run --dry-run --state-db STORE` without the
daemon's --config cut a daemon's 90-day history of cycles and decisions to the default 30."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from slurm_hase.cli import schedd_cmd
from slurm_hase.daemon.fake import FakeBackend, gpu_node
from slurm_hase.store.lock import StoreLock
from slurm_hase.store.state import CycleRow, DecisionRow, StateStore
from tests.conftest import run_main
from tests.unit.test_daemon_loop import pjob

Capsys = pytest.CaptureFixture[str]
DAY = 86400.0


def _store_with_old_history(db: Path) -> None:
    """A cycle of 60 days ago: inside a 90-day history_days, outside the default 30."""
    store = StateStore(db)
    store.record_cycle(CycleRow(time.time() - 60 * DAY, 0.1, "fair", False, "d", 1, 0, 1, 1,
                                0, 0), [DecisionRow("1", "d", 40, None, "applied")], {})
    store.close()


def _dry_run(tmp_path: Path, db: Path, monkeypatch: pytest.MonkeyPatch, capsys: Capsys
             ) -> list[str]:
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.setattr(schedd_cmd, "_backend",
                        lambda: FakeBackend([pjob("7")], [gpu_node("a1", "a100")]))
    cfg = tmp_path / "c.toml"
    cfg.write_text('[schedd]\nlog_format = "text"\nlog_level = "ERROR"\n')
    code, _, err = run_main(["schedd", "run", "--once", "--dry-run", "--config", str(cfg),
                             "--state-db", str(db)], capsys)
    assert code == 0, err
    return [str(c["policy"]) + ("/dry" if c["dry_run"] else "")
            for c in StateStore(db).cycles(10)]


def test_a_dry_run_beside_the_daemon_prunes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Capsys) -> None:
    db = tmp_path / "s.db"
    _store_with_old_history(db)
    with StoreLock(db):  # the daemon runs on the store
        cycles = _dry_run(tmp_path, db, monkeypatch, capsys)
    assert cycles == ["fair/dry", "fair"]


def test_a_dry_run_alone_prunes_by_its_history_days(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Capsys) -> None:
    db = tmp_path / "s.db"
    _store_with_old_history(db)
    assert _dry_run(tmp_path, db, monkeypatch, capsys) == ["fair/dry"]


def test_a_dry_run_beside_the_daemon_leaves_the_daemons_model_as_the_one_in_use(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Capsys) -> None:
    """`hase schedd status` reports the latest recorded model as the one in use; a dry run
    trying another model beside the daemon recorded its own, so status named a model the
    daemon never loaded."""
    db = tmp_path / "s.db"
    store = StateStore(db)
    store.record_model("/etc/slurm-hase/site.json", "ab" * 8, {})
    store.close()
    with StoreLock(db):
        _dry_run(tmp_path, db, monkeypatch, capsys)
    model = StateStore(db).latest_model()
    assert model is not None and model["path"] == "/etc/slurm-hase/site.json"
    _dry_run(tmp_path, db, monkeypatch, capsys)  # alone, it is the daemon: recorded
    model = StateStore(db).latest_model()
    assert model is not None and model["path"] == "(bundled)"
