"""`hase schedd reset --json`: each job's outcome, its scontrol command, the error count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_hase.cli import schedd_cmd
from slurm_hase.cli.main import cli
from slurm_hase.daemon.fake import FakeBackend
from slurm_hase.errors import SlurmError
from slurm_hase.slurm.types import Job, JobState
from slurm_hase.store.state import CycleRow, StateStore
from tests.conftest import run_main


def _store(db: Path, owned: dict[str, tuple[int, str | None]]) -> None:
    st = StateStore(db)
    st.record_cycle(CycleRow(5.0, 0.2, "hase", False, "d", 3, 1, 2, 2, 0, 0), [], owned)
    st.close()


def _job(job_id: str, nice: int, features: str, state: JobState = JobState.PENDING) -> Job:
    return Job(job_id=job_id, name="j", user="u", account="a", partition="gpu", state=state,
               nice=nice, features=features)


@pytest.fixture
def backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeBackend:
    monkeypatch.delenv("SLURM_CONF", raising=False)
    _store(tmp_path / "s.db", {"7": (-50, "a100"), "8": (-60, "v100"), "9": (-70, None)})
    fb = FakeBackend([_job("7", -50, "a100"), _job("8", -60, "v100"),
                      _job("9", -70, "", JobState.RUNNING)])
    monkeypatch.setattr(schedd_cmd, "_backend", lambda: fb)
    return fb


def test_dry_run_json_lists_the_planned_commands_and_changes_nothing(
        tmp_path: Path, backend: FakeBackend) -> None:
    out = CliRunner().invoke(cli, ["schedd", "reset", "--dry-run", "--json",
                                   "--state-db", str(tmp_path / "s.db")])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["dry_run"] is True and data["errors"] == 0
    jobs = {j["job_id"]: j for j in data["jobs"]}
    assert jobs["7"]["outcome"] == "planned"
    assert jobs["7"]["command"] == ["scontrol", "update", "jobid=7", "Nice=0", "Features="]
    assert jobs["9"]["outcome"] == "kept" and jobs["9"]["command"] is None
    assert "running" in jobs["9"]["detail"]
    assert backend.updates == []
    assert set(StateStore(tmp_path / "s.db").owned()) == {"7", "8", "9"}


def test_json_names_the_job_that_failed_and_exits_1_keeping_it(
        tmp_path: Path, backend: FakeBackend, capsys: pytest.CaptureFixture[str]) -> None:
    backend.fail_updates["8"] = SlurmError("Job is no longer pending execution")
    code, stdout, stderr = run_main(["schedd", "reset", "--json",
                                     "--state-db", str(tmp_path / "s.db")], capsys)
    assert code == 1
    data = json.loads(stdout)  # the JSON is whole on stdout; the error goes to stderr
    assert data["dry_run"] is False and data["errors"] == 1
    jobs = {j["job_id"]: j for j in data["jobs"]}
    assert jobs["7"]["outcome"] == "reset"
    assert jobs["8"]["outcome"] == "error" and "no longer pending" in jobs["8"]["detail"]
    assert jobs["8"]["command"] == ["scontrol", "update", "jobid=8", "Nice=0", "Features="]
    assert "hase: error: 1 jobs could not be reset" in stderr
    assert set(StateStore(tmp_path / "s.db").owned()) == {"8", "9"}  # 7 forgotten, 8 and 9 kept
