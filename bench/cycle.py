"""Benchmark one full daemon cycle (observe -> decide -> plan -> act).

    python bench/cycle.py --live --jobs 300            # local cluster (SLURM_CONF set), target < 2 s
    python bench/cycle.py --fake --jobs 5000 --nodes 500 # in-memory backend: daemon overhead only

--live submits N untyped GPU jobs that cannot start yet (--begin=now+1hour, so they pend but are
not held), times a cold cycle (every job gets Nice/Features) and a warm one (nothing changed),
then cancels exactly the jobs it submitted. --fake also times a warm cycle on new Job objects
whose priorities moved, as a squeue backend parses them every cycle ("fresh"). Prints one JSON
line per policy.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import zlib
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slurm_hase.daemon.cycle import CycleConfig, JobEstimate, OwnedAttrs, run_cycle  # noqa: E402
from slurm_hase.daemon.fake import FakeBackend, gpu_node  # noqa: E402
from slurm_hase.policy.registry import make_policy  # noqa: E402
from slurm_hase.policy.usage import UsageLedger  # noqa: E402
from slurm_hase.slurm.backend import SlurmBackend  # noqa: E402
from slurm_hase.slurm.types import GpuRequest, Job, JobState  # noqa: E402

TYPES8 = ("h100", "a100", "l40s", "a10", "v100", "l4", "t4", "p100")
SPEED = {"h100": 0.5, "a100": 1.0, "l40s": 1.4, "a10": 2.2, "v100": 1.8, "l4": 2.6,
         "t4": 3.0, "p100": 2.8}


QUANTUM = [1]


class WallClock:
    def now(self) -> float:
        return time.time()


class HashEstimator:
    """Deterministic synthetic runtimes (no model needed): base from the job id, ratio by type."""

    repeatable = True  # the answer depends on the job id and the types only

    def estimate(self, job: Job, gpu_types: Sequence[str]) -> JobEstimate | None:
        base = 600.0 + zlib.crc32(job.job_id.encode()) % 7200
        return JobEstimate({t: base * SPEED.get(t, 2.0) for t in gpu_types})


def fake_cluster(n_jobs: int, n_nodes: int) -> FakeBackend:
    nodes = [gpu_node(f"n{i}", TYPES8[i % 8], 8, alloc=8 if i % 3 else 0) for i in range(n_nodes)]
    jobs = [Job(job_id=str(1000 + i), name="b", user=f"u{i % 40}", account=f"acct{i % 12}",
                partition="gpu", state=JobState.PENDING, submit_time=1_000_000 + i,
                gpu=GpuRequest(1 + (i % 4 == 0), TYPES8[i % 8] if i % 10 == 0 else None, "job"))
            for i in range(n_jobs)]
    return FakeBackend(jobs, nodes)


def one(backend: SlurmBackend, policy_name: str, owned: dict[str, OwnedAttrs],
        workers: int, batch: bool = False) -> dict[str, float | int]:
    policy = make_policy(policy_name)
    cfg = CycleConfig(partitions=None, update_workers=workers, batch_updates=batch,
                      nice_quantum=QUANTUM[0])
    t0 = time.perf_counter()
    res = run_cycle(backend, policy, HashEstimator(), WallClock(), UsageLedger(86400.0), {},
                    cfg, owned=owned)
    return {"wall_s": round(time.perf_counter() - t0, 4), "pending": res.pending,
            "applied": len(res.applied), "errors": len(res.errors)}


def live(n_jobs: int, policies: Sequence[str], workers: int, batch: bool) -> None:
    from slurm_hase.slurm.command_backend import CommandBackend
    from slurm_hase.slurm.runner import SubprocessRunner

    backend = CommandBackend(SubprocessRunner())
    submitted: list[str] = []
    try:
        for i in range(n_jobs):
            submitted.append(backend.submit(
                ["--parsable", "--begin=now+3600", "--gpus=1", "-J", f"bench{i}",
                 "--account", "teama" if i % 2 else "teamb", "--wrap", "sleep 1"]))
        for name in policies:
            owned: dict[str, OwnedAttrs] = {}
            cold = one(backend, name, owned, workers, batch)
            warm = one(backend, name, owned, workers, batch)
            ROWS.append((name, cold, warm))
            print(json.dumps({"bench": "cycle-live", "policy": name, "jobs": n_jobs,
                              "workers": workers, "batch": batch, "nice_quantum": QUANTUM[0],
                              "cold": cold, "warm": warm}))
            for jid in owned:  # undo so the next policy starts cold again
                from slurm_hase.slurm.types import JobUpdate

                backend.update_job(jid, JobUpdate(nice=0, features=""))
    finally:
        for jid in submitted:
            try:
                backend.cancel(jid)
            except Exception as exc:  # noqa: BLE001 - best effort cleanup, reported
                print(f"cancel {jid}: {exc}", file=sys.stderr)


def fake(n_jobs: int, n_nodes: int, policies: Sequence[str]) -> None:
    for name in policies:
        backend = fake_cluster(n_jobs, n_nodes)
        owned: dict[str, OwnedAttrs] = {}
        cold = one(backend, name, owned, 1)
        warm = one(backend, name, owned, 1)
        # what squeue hands back a priority-calculation period later: every Job a new object,
        # every pending job's priority one higher (age); built before the clock starts. Median
        # of 5 such cycles
        runs = []
        for _ in range(5):
            backend.job_list = [replace(j, priority=j.priority + 1) for j in backend.job_list]
            runs.append(one(backend, name, owned, 1))
        fresh = sorted(runs, key=lambda r: r["wall_s"])[2]
        ROWS.append((name, cold, warm))
        FRESH[name] = fresh
        print(json.dumps({"bench": "cycle-fake", "policy": name, "jobs": n_jobs,
                          "nodes": n_nodes, "cold": cold, "warm": warm, "fresh": fresh}))


ROWS: list[tuple[str, dict[str, float | int], dict[str, float | int]]] = []
FRESH: dict[str, dict[str, float | int]] = {}  # --fake: the warm cycle on new Job objects


def print_table(target_s: float) -> None:
    """One row per policy: cold (first, every job updated) and warm (nothing changed) cycles."""
    ref = next((float(c["wall_s"]) for n, c, _ in ROWS if n == "gavel"), None)
    fresh_col = f" {'fresh s':>8s}" if FRESH else ""
    print(f"\n{'policy':8s} {'cold s':>8s} {'updates':>8s} {'warm s':>8s}{fresh_col} "
          f"{'x gavel':>8s}  target")
    for name, cold, warm in ROWS:
        ratio = f"{float(cold['wall_s']) / ref:8.2f}" if ref else f"{'-':>8s}"
        ok = "OK" if float(cold["wall_s"]) <= target_s else "OVER"
        fresh = f" {float(FRESH[name]['wall_s']):8.3f}" if name in FRESH else ""
        print(f"{name:8s} {float(cold['wall_s']):8.3f} {int(cold['applied']):8d} "
              f"{float(warm['wall_s']):8.3f}{fresh} {ratio}  {ok} (<= {target_s:g} s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--live", action="store_true")
    mode.add_argument("--fake", action="store_true")
    ap.add_argument("--jobs", type=int, default=300)
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--policies", default="hase,fair,gavel")
    ap.add_argument("--no-batch", action="store_true", help="one scontrol call per job")
    ap.add_argument("--nice-quantum", type=int, default=1)
    args = ap.parse_args()
    policies = [p for p in args.policies.split(",") if p]
    QUANTUM[0] = args.nice_quantum
    if args.live:
        live(args.jobs, policies, args.workers, not args.no_batch)
        print_table(2.0)
    else:
        fake(args.jobs, args.nodes, policies)
        print_table(float("inf"))


if __name__ == "__main__":
    main()
