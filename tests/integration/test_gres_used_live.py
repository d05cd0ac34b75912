"""GPUs that MPS shares hold are not free, on the real local cluster.

Slurm's AllocTRES counts whole GPUs only: a node with one job on `--gres=mps:50` shows no GPU
in use there, yet Slurm gives the GPU the share sits on to no whole-GPU job. The backend
reads `scontrol show node -d`, whose GresUsed names the GPU the share holds; the daemon's
pools then count it as busy, as the simulator's do. (Shards: tests/integration/test_shard_live.py.)
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from slurm_hase.daemon.cycle import CycleConfig, JobEstimate, run_cycle
from slurm_hase.daemon.loop import WallClock
from slurm_hase.policy.registry import make_policy
from slurm_hase.policy.usage import UsageLedger
from slurm_hase.slurm.command_backend import CommandBackend
from slurm_hase.slurm.parse_text import parse_scontrol_nodes
from slurm_hase.slurm.runner import SubprocessRunner
from slurm_hase.slurm.types import Job, Node
from tests.integration.test_adapter_live import wait_for

pytestmark = pytest.mark.slurm
RUNTIME = {"a100": 100.0, "v100": 200.0, "t4": 300.0}
DRY = CycleConfig(partitions=("gpu",), dry_run=True)


class Table:
    def estimate(self, job: Job, gpu_types: Sequence[str]) -> JobEstimate | None:
        if not job.name.startswith("hase-"):
            return None
        return JobEstimate({t: RUNTIME[t] for t in gpu_types if t in RUNTIME})


class WithoutDetail(CommandBackend):
    """The backend as it read nodes before: `scontrol show node -o`, no GresUsed."""

    def nodes(self) -> list[Node]:
        res = self.runner.run(["scontrol", "show", "node", "-o"]).check()
        return parse_scontrol_nodes(res.stdout)


def _submit(backend: CommandBackend, ids: list[str], *args: str) -> str:
    jid = backend.submit(["--parsable", "-o", "/dev/null", "-p", "gpu", "-t", "5", *args])
    ids.append(jid)
    return jid


def test_a_gpu_an_mps_share_holds_is_busy_for_the_backend_and_the_daemon(
        slurm_backend: CommandBackend, slurm_runner: SubprocessRunner, jobs: list[str]) -> None:
    # every A100 busy: seven as whole GPUs, the eighth held by one MPS share
    blockers = [_submit(slurm_backend, jobs, "-w", "a100-1", "--gpus=a100:4", "--wrap", "sleep 300"),
                _submit(slurm_backend, jobs, "-w", "a100-2", "--gpus=a100:3", "--wrap", "sleep 300"),
                _submit(slurm_backend, jobs, "-w", "a100-2", "--gres=mps:50", "--wrap", "sleep 300")]

    def all_running() -> list[Job] | None:
        seen = [j for j in slurm_backend.jobs() if j.job_id in blockers]
        return seen if len(seen) == 3 and all(j.state.name == "RUNNING" for j in seen) else None

    wait_for("the three blockers to run", all_running)
    nodes = {n.name: n for n in slurm_backend.nodes()}
    assert nodes["a100-2"].gpus_alloc == {"a100": 4}  # 3 whole + the one the share holds
    assert nodes["a100-1"].gpus_alloc == {"a100": 4}
    before = {n.name: n for n in WithoutDetail(slurm_runner).nodes()}
    assert before["a100-2"].gpus_alloc == {"a100": 3}  # AllocTRES alone: one A100 "free"

    # two one-GPU jobs, A100 fastest: with no A100 free now they are best on V100s
    pending = [_submit(slurm_backend, jobs, "-J", f"hase-{i}", "--gpus=1", "--begin=now+3600",
                       "--wrap", "sleep 60") for i in range(2)]
    hase = make_policy("hase", beta=0.0)

    def features(backend: CommandBackend) -> dict[str, str]:
        res = run_cycle(backend, hase, Table(), WallClock(), UsageLedger(3600.0), {}, DRY,
                        owned={})
        assert res.errors == []
        return {jid: upd.features or "" for jid, upd in res.planned if jid in pending}

    planned = features(slurm_backend)
    assert planned == {jid: "v100" for jid in pending}, planned
    # control: nodes read without GresUsed, as before; then one job is pinned to the A100
    # the share holds, and would wait there for the blockers' 5 minutes
    old = features(WithoutDetail(slurm_runner))
    assert "a100" in old.values(), old
