"""`hase schedd run --once [--dry-run]` with requeue = true lists the rotation's requeues."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from slurm_hase.cli import schedd_cmd
from slurm_hase.cli.main import main
from slurm_hase.daemon.fake import FakeBackend, gpu_node
from slurm_hase.predict.descriptor import WorkloadDescriptor
from slurm_hase.slurm.types import GpuRequest, Job, JobState
from slurm_hase.store.state import StateStore

LONG_CKPT = WorkloadDescriptor(model="resnet50", batch_size=64, iterations=100_000_000,
                               checkpoint=True).to_comment()
SHORT = WorkloadDescriptor(model="resnet50", batch_size=64, iterations=1000).to_comment()


def _cluster() -> FakeBackend:
    """teama holds all 4 V100s with long opted-in jobs (an hour in); teamb waits with one."""
    started = int(time.time()) - 3600
    running = [Job(job_id=str(i), name="train", user="u", account="teama", partition="gpu",
                   state=JobState.RUNNING, gpu=GpuRequest(1, None, "job"),
                   alloc_gpus={"v100": 1}, start_time=started, submit_time=started - 60,
                   time_limit_s=10**7, comment=LONG_CKPT, requeue=True) for i in range(1, 5)]
    waiting = Job(job_id="9", name="short", user="w", account="teamb", partition="gpu",
                  state=JobState.PENDING, gpu=GpuRequest(1, None, "job"),
                  submit_time=started + 60, time_limit_s=3600, comment=SHORT)
    return FakeBackend([*running, waiting], [gpu_node("v1", "v100", alloc=4)])


def _run_once(tmp_path: Path, backend: FakeBackend, dry: bool, monkeypatch: pytest.MonkeyPatch,
              capsys: pytest.CaptureFixture[str], requeue: bool = True) -> tuple[int, str, str]:
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.setattr(schedd_cmd, "_backend", lambda: backend)
    cfg = tmp_path / "c.toml"
    cfg.write_text('[schedd]\nlog_format = "text"\nlog_level = "ERROR"\n'
                   f'requeue = {str(requeue).lower()}\n'
                   '[policy]\nname = "fair"\n[shares]\nteama = 1.0\nteamb = 1.0\n')
    with pytest.raises(SystemExit) as exc:
        main(["schedd", "run", "--once", *(["--dry-run"] if dry else []), "--config", str(cfg),
              "--state-db", str(tmp_path / "s.db")])
        raise SystemExit(0)
    out = capsys.readouterr()
    code = exc.value.code
    return (code if isinstance(code, int) else 1), out.out, out.err


@pytest.mark.parametrize("dry", [True, False])
def test_run_once_lists_the_requeue_it_makes_or_would_make(
        tmp_path: Path, dry: bool, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The printed cycle listed only Nice/Features updates: a dry run that would requeue a
    running job said nothing of it, and a real cycle requeued one without a word."""
    backend = _cluster()
    code, out, err = _run_once(tmp_path, backend, dry, monkeypatch, capsys)
    assert code == 0, err
    verb = "would run" if dry else "ran"
    requeue_lines = [ln for ln in out.splitlines() if ln.startswith(f"{verb}: scontrol requeue ")]
    assert backend.requeued == ([] if dry else [ln.rsplit(" ", 1)[1] for ln in requeue_lines])
    assert len(requeue_lines) == 1
    assert f"{verb}: scontrol update jobid=9 " in out
    assert " and 1 requeues for " in out.splitlines()[-1]


def test_with_requeue_off_the_policy_plans_no_rotation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """With the default `requeue = false`, opted-in running jobs still reached the policy as
    preemptible: every deciding cycle it planned a rotation (and routed the waiting job to
    the GPUs that would free) that the daemon then refused, printing `# job 1: requeue is off`
    and storing a `requeue ... skipped` row per job and cycle for `hase schedd job`."""
    backend = _cluster()
    code, out, err = _run_once(tmp_path, backend, False, monkeypatch, capsys, requeue=False)
    assert code == 0, err
    assert backend.requeued == [] and "requeue" not in out
    assert "ran: scontrol update jobid=9 " in out
    rows = StateStore(tmp_path / "s.db").decisions()
    assert [r["job_id"] for r in rows] == ["9"] and rows[0]["action"] == "update"
