"""What the daemon did to one job and why: reasons and requeues in the store, pruning of old
cycles, the v1 -> v2 store migration and `hase schedd job`."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_hase.cli.main import cli
from slurm_hase.daemon.config import from_mapping
from slurm_hase.daemon.cycle import CycleConfig
from slurm_hase.daemon.fake import FakeBackend, gpu_node
from slurm_hase.daemon.loop import Daemon, LoopSettings
from slurm_hase.errors import ConfigError, StoreError
from slurm_hase.policy.types import ClusterState, Decision
from slurm_hase.slurm.types import GpuRequest, Job, JobState
from slurm_hase.store.state import MIGRATIONS, CycleRow, DecisionRow, StateStore
from tests.unit.test_daemon_cycle import Clock
from tests.unit.test_daemon_requeue import Est

CKPT = '{"hase":1,"model":"resnet50","ckpt":1}'


class Mono:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class Rotating:
    """Routes every pending job to a100 and asks to requeue every running one."""

    name = "rotating"
    summary = "test"

    def decide(self, state: ClusterState) -> list[Decision]:
        out = [Decision(p.job_id, nice=40, gpu_types=("a100",), reason="test: routed a100")
               for p in state.pending]
        return out + [Decision(r.job_id, requeue=True, nice=90, reason=f"test: rotate {r.job_id}")
                      for r in state.running]


def pending(jid: str) -> Job:
    return Job(job_id=jid, name="j", user="u", account="a", partition="gpu",
               state=JobState.PENDING, gpu=GpuRequest(1, None, "job"))


def running(jid: str, comment: str = CKPT) -> Job:
    return Job(job_id=jid, name="train", user="u", account="b", partition="gpu",
               state=JobState.RUNNING, gpu=GpuRequest(1, None, "job"), alloc_gpus={"a100": 1},
               start_time=1000, time_limit_s=1_000_000, comment=comment, requeue=True)


def daemon(tmp_path: Path, fb: FakeBackend, *, dry: bool = False, history_s: float = 3600.0,
           clock: Clock | None = None, mono: Mono | None = None) -> tuple[Daemon, StateStore]:
    store = StateStore(tmp_path / "s.db")
    d = Daemon(fb, Rotating(), Est(), clock or Clock(100_000.0), store,
               CycleConfig(dry_run=dry, requeue=True, refresh_s=0.0),
               LoopSettings(interval_s=30, half_life_s=60, history_s=history_s),
               shares={"a": 1.0, "b": 1.0}, monotonic=mono or Mono())
    return d, store


def test_updates_and_requeues_are_recorded_with_the_policys_reason(tmp_path: Path) -> None:
    fb = FakeBackend([pending("1"), running("2"), running("3", comment="")],
                     [gpu_node("a1", "a100", alloc=2)])
    d, store = daemon(tmp_path, fb)
    d.step()
    (upd,) = store.job_history("1")
    assert (upd["action"], upd["outcome"], upd["features"], upd["reason"]) == (
        "update", "applied", "a100", "test: routed a100")
    (req,) = store.job_history("2")
    assert (req["action"], req["outcome"], req["answer"], req["reason"]) == (
        "requeue", "applied", "ok", "test: rotate 2")
    assert req["nice"] is not None  # the Nice set right after the requeue is on the row
    (refused,) = store.job_history("3")  # no checkpoint=yes: refused, and the row says why
    assert refused["action"] == "requeue" and refused["outcome"] == "skipped"
    assert "not opted in" in refused["answer"] and refused["reason"] == "test: rotate 3"
    assert fb.requeued == ["2"]


def test_a_dry_run_records_the_requeue_as_planned(tmp_path: Path) -> None:
    fb = FakeBackend([running("2")], [gpu_node("a1", "a100", alloc=1)])
    d, store = daemon(tmp_path, fb, dry=True)
    d.step()
    (req,) = store.job_history("2")
    assert (req["action"], req["outcome"], req["dry_run"]) == ("requeue", "planned", 1)
    assert fb.requeued == []


def test_old_cycles_are_pruned_at_most_hourly(tmp_path: Path) -> None:
    clock, mono = Clock(100_000.0), Mono()
    fb = FakeBackend([pending("1")], [gpu_node("a1", "a100")])
    d, store = daemon(tmp_path, fb, history_s=3600.0, clock=clock, mono=mono)
    d.step()
    first = store.cycles()[0]["id"]
    clock.t += 7200.0
    fb.job_list.append(pending("2"))
    d.step()  # the first cycle is older than the history now, but the last prune was < 1 h ago
    assert first in [c["id"] for c in store.cycles()]
    clock.t += 60.0
    mono.t += 3601.0
    fb.job_list.append(pending("3"))
    d.step()
    ids = [c["id"] for c in store.cycles()]
    assert first not in ids and len(ids) == 2
    assert store.job_history("1") == [] or all(r["cycle_id"] != first
                                               for r in store.job_history("1"))
    assert all(r["cycle_id"] in ids for r in store.decisions())


def test_history_zero_keeps_everything(tmp_path: Path) -> None:
    clock, mono = Clock(100_000.0), Mono()
    fb = FakeBackend([pending("1")], [gpu_node("a1", "a100")])
    d, store = daemon(tmp_path, fb, history_s=0.0, clock=clock, mono=mono)
    d.step()
    clock.t += 10 * 86400.0
    mono.t += 10 * 86400.0
    fb.job_list.append(pending("2"))
    d.step()
    assert len(store.cycles()) == 2


def test_a_version_1_store_is_migrated_and_its_rows_read(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                 "applied_at REAL NOT NULL)")
    conn.executescript(MIGRATIONS[0][1])
    conn.execute("INSERT INTO migrations VALUES (1, 'initial', 0)")
    conn.execute("INSERT INTO cycles (started, duration_s, policy, dry_run, inputs_digest, "
                 "pending, running, decisions, applied, skipped, errors) "
                 "VALUES (5, 0.1, 'fair', 0, 'd', 1, 0, 1, 1, 0, 0)")
    conn.execute("INSERT INTO decisions (cycle_id, job_id, inputs_digest, nice, features, "
                 "outcome) VALUES (1, '7', 'd', 10, 'v100', 'applied')")
    conn.execute("INSERT INTO owned (job_id, nice, features, updated) VALUES ('7', 10, 'v100', 5)")
    conn.commit()
    conn.close()
    st = StateStore(path)
    assert st.schema_version() == len(MIGRATIONS) == 3
    assert st.owned_rows() == {"7": (10, "v100", None, None)}  # the prev pair came with v3
    (row,) = st.job_history("7")
    assert (row["action"], row["reason"], row["started"], row["policy"]) == (
        "update", "", 5.0, "fair")


def _store_with_history(db: Path) -> None:
    st = StateStore(db)
    cyc = CycleRow(1_796_000_000.0, 0.1, "fair", False, "d", 1, 1, 2, 1, 1, 0)
    st.record_cycle(cyc, [DecisionRow("42", "d", -500, "a100", "applied", "ok",
                                      reason="fair: routed a100"),
                          DecisionRow("42", "d", None, None, "skipped", "requeue refused: x",
                                      action="requeue", reason="rotate: a100 GPUs for job 9")],
                    {"42": (-500, "a100")})
    st.close()


def test_schedd_job_prints_the_history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_CONF", raising=False)
    db = tmp_path / "s.db"
    _store_with_history(db)
    out = CliRunner().invoke(cli, ["schedd", "job", "42", "--state-db", str(db)])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert "pending or running at the last cycle, with the Nice -500 and Features a100 the daemon last set" in lines[0]
    assert "requeue" in lines[2] and "rotate: a100 GPUs for job 9  [requeue refused: x]" in lines[2]
    assert "update" in lines[3] and lines[3].endswith("fair: routed a100")  # "ok" not repeated
    js = json.loads(CliRunner().invoke(
        cli, ["schedd", "job", "42", "--json", "--limit", "1", "--state-db", str(db)]).output)
    assert js["holds"] == {"nice": -500, "features": "a100"}
    assert [r["action"] for r in js["decisions"]] == ["requeue"]
    none = CliRunner().invoke(cli, ["schedd", "job", "43", "--state-db", str(db)])
    assert none.exit_code == 0 and "job 43: no decision recorded" in none.output


def test_schedd_job_without_a_store_names_the_path(tmp_path: Path) -> None:
    db = tmp_path / "none.db"
    out = CliRunner().invoke(cli, ["schedd", "job", "1", "--state-db", str(db)])
    assert out.exit_code != 0 and f"no state store at {db}" in str(out.exception)
    assert not db.exists()


def test_history_days_config() -> None:
    assert from_mapping({"schedd": {"history_days": 7}}).history_days == 7.0
    assert from_mapping({}).history_days == 30.0
    with pytest.raises(ConfigError, match=r"\[schedd\] history_days: -1 is out of range"):
        from_mapping({"schedd": {"history_days": -1}})


def test_a_locked_store_while_pruning_is_survived(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    clock, mono = Clock(100_000.0), Mono()
    fb = FakeBackend([pending("1")], [gpu_node("a1", "a100")])
    d, store = daemon(tmp_path, fb, history_s=3600.0, clock=clock, mono=mono)

    def locked(before: float) -> None:
        raise StoreError("state store s.db is locked; 1 writes kept for retry")

    monkeypatch.setattr(store, "prune_history", locked)
    assert d.step() <= 30  # the cycle is done and recorded; only the pruning waits
    assert len(store.cycles()) == 1 and store.latest_usage() is not None
    assert 'kind="store"' in d.metrics.render()


def test_status_counts_each_cycles_requeues(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_CONF", raising=False)
    fb = FakeBackend([pending("1"), running("2"), running("3", comment="")],
                     [gpu_node("a1", "a100", alloc=2)])
    d, store = daemon(tmp_path, fb)
    d.step()
    assert [c["requeued"] for c in store.cycles()] == [1]  # job 2; job 3's was refused
    store.close()
    out = CliRunner().invoke(cli, ["schedd", "status", "--state-db", str(tmp_path / "s.db")])
    assert out.exit_code == 0 and "requeued=1 " in out.output, out.output
