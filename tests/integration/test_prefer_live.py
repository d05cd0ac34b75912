"""--prefer on the real local cluster. Slurm tries a job's preferred features first and, where
they can be met, runs it there in place of its constraint (`Features=a100|v100` and
`--prefer=t4` ran on t4 with t4 idle), so neither hsbatch nor the daemon set a GPU-type
constraint on such a job: it would not hold."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_hase.daemon.cycle import OwnedAttrs, run_cycle
from slurm_hase.daemon.loop import WallClock
from slurm_hase.policy.registry import make_policy
from slurm_hase.policy.usage import UsageLedger
from slurm_hase.slurm.command_backend import CommandBackend
from slurm_hase.slurm.runner import SubprocessRunner
from tests.integration.test_daemon_live import CFG, Table, squeue, submit, submitted

pytestmark = pytest.mark.slurm
__all__ = ["submitted"]  # the fixture, used by name
HSBATCH = [sys.executable, "-m", "slurm_hase.hsbatch.cli"]


@pytest.fixture
def cancel_after(slurm_runner: SubprocessRunner) -> Iterator[list[str]]:
    ids: list[str] = []
    yield ids
    if ids:
        slurm_runner.run(["scancel", *ids])


def _show(runner: SubprocessRunner, job_id: str) -> dict[str, str]:
    out = runner.run(["squeue", "-h", "-j", job_id, "-O", "State:|,Prefer:|,Feature:|,NodeList:|"]
                     ).check().stdout
    state, prefer, features, nodes = (v.strip() for v in out.strip().split("|")[:4])
    return {"state": state, "prefer": prefer, "features": features, "nodes": nodes}


def test_slurm_runs_a_job_on_its_preferred_type_in_place_of_its_constraint(
        slurm_runner: SubprocessRunner, cancel_after: list[str]) -> None:
    """What the rules below rest on, on this Slurm release."""
    job_id = slurm_runner.run(["sbatch", "--parsable", "-o", "/dev/null", "-A", "teama",
                               "--gpus=1", "-t", "2", "--prefer=t4", "--constraint=a100|v100",
                               "--wrap", "sleep 60"]).check().stdout.strip()
    cancel_after.append(job_id)
    deadline = time.time() + 60
    while (shown := _show(slurm_runner, job_id))["state"] != "RUNNING":
        assert time.time() < deadline, shown
        time.sleep(0.5)
    assert shown["nodes"].startswith("t4-") and shown["features"] == "t4", shown


def test_hsbatch_adds_no_constraint_beside_prefer(
        slurm_runner: SubprocessRunner, cancel_after: list[str], tmp_path: Path) -> None:
    script = tmp_path / "prefers.sh"
    # --begin keeps it from running (a held job gets no constraint: sbatch does not check one)
    script.write_text("#!/bin/bash\n#SBATCH --begin=now+3600 -o /dev/null\n#SBATCH --gpus=1\n"
                      "#SBATCH --prefer=t4\n#HASE params=7000 gflops=5000 precision=fp16\nsleep 1\n")
    r = slurm_runner.run([*HSBATCH, "--parsable", str(script)], cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    cancel_after.append(r.stdout.strip())
    shown = _show(slurm_runner, r.stdout.strip())
    # without --prefer the same job gets Features=a100 (test_hsbatch_compat)
    assert (shown["prefer"], shown["features"]) == ("t4", "(null)"), shown


def test_daemon_orders_a_job_with_prefer_but_sets_no_type(
        slurm_backend: CommandBackend, slurm_runner: SubprocessRunner,
        submitted: list[str]) -> None:
    prefers = submit(slurm_backend, submitted, "hase-p0", "--gpus=1", "--prefer=t4")
    plain = submit(slurm_backend, submitted, "hase-p1", "--gpus=1")
    owned: dict[str, OwnedAttrs] = {}
    res = run_cycle(slurm_backend, make_policy("hase"), Table(), WallClock(),
                    UsageLedger(3600.0), {}, CFG, owned=owned)
    assert res.errors == []
    rows = squeue(slurm_runner, [prefers, plain])
    assert rows[plain][1] in ("a100", "v100") and rows[prefers][1] == "", rows  # Features
    notes = dict(res.skipped)
    assert "user prefers 't4' (--prefer)" in notes[prefers]
