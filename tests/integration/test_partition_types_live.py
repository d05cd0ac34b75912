"""`hase schedd run` on the real local cluster routes a job only to GPU types of its partition.

Partition `debug` holds only the T4 nodes; with no config every partition is managed and the
policy's pools span a100, v100 and t4. A debug job must never be constrained to a100 (the
safety layer would drop it: "no usable node satisfies a100"): it is planned with Features=t4.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_hase.errors import SlurmError
from slurm_hase.slurm.command_backend import CommandBackend

pytestmark = pytest.mark.slurm
DESCRIPTOR = json.dumps({"hase": 1, "model": "resnet50", "bs": 64, "iters": 1000},
                        separators=(",", ":"))


def test_schedd_routes_a_debug_job_only_to_t4(slurm_backend: CommandBackend,
                                               slurm_env: dict[str, str], tmp_path: Path) -> None:
    # Pending but not held (a held job gets no decision at all): it waits for its begin time,
    # untyped, with a descriptor so the predictor estimates it.
    jid = slurm_backend.submit(["--parsable", "-J", "hase-parttypes", "-p", "debug", "-A", "teamb",
                                "--begin=now+3600", "-t", "5", "--gpus=1",
                                f"--comment={DESCRIPTOR}", "--wrap", "sleep 60"])
    try:
        hase = Path(sys.executable).parent / "hase"
        env = {**os.environ, **slurm_env}
        res = subprocess.run([str(hase), "schedd", "run", "--once", "--dry-run",
                              "--state-db", str(tmp_path / "state.db")],
                             env=env, capture_output=True, text=True, timeout=180, check=False)
        out = res.stdout + res.stderr
        assert res.returncode == 0, out
        notes = [line for line in out.splitlines() if line.startswith(f"# job {jid}:")]
        planned = [args for args in map(_update_args, out.splitlines())
                   if args.get("jobid") is not None and jid in args["jobid"].split(",")]
        # Default policy (fair), fresh state store, no constraint of the job's own: its only
        # usable type is t4, so the policy routes it to t4 and plan_updates keeps that. Any note
        # here ("no usable node satisfies a100", "dropped unsatisfiable types ...") is the bug.
        assert notes == [], out
        assert len(planned) == 1, f"job {jid}: want one planned update, got {planned}:\n{out}"
        assert planned[0].get("Features") == "t4", (planned, out)
    finally:
        with contextlib.suppress(SlurmError):
            slurm_backend.cancel(jid)


def _update_args(line: str) -> dict[str, str]:
    """KEY=VALUE arguments of a `would run: scontrol update ...` line ({} for other lines)."""
    if not line.startswith("would run: "):
        return {}
    words = shlex.split(line.removeprefix("would run: "))
    return dict(w.split("=", 1) for w in words if "=" in w)
