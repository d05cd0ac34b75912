"""The slurm-hase demo on the local cluster: `python -m slurm_hase.cli.demo` (./run.sh demo).

Two accounts submit a mixed GPU workload with hsbatch; the daemon (policy `fair`) sets GPU-type
constraints and Nice; Slurm starts the jobs; sacct shows where they ran; the fairness report sums
it up; the simulator compares policies on a real trace excerpt.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from slurm_hase.errors import HaseError
from slurm_hase.slurm.localcluster.paths import cluster_paths
from slurm_hase.slurm.runner import CommandResult, SubprocessRunner

# (account, job name, sbatch args, #HASE description). Descriptions use the model table.
WORKLOAD: list[tuple[str, str, list[str], str]] = [
    ("teama", "resnet50-a", ["--gpus=1"], "model=resnet50 batch_size=64 iterations=3000"),
    ("teama", "resnet50-b", ["--gpus=1"], "model=resnet50 batch_size=64 iterations=3000"),
    ("teama", "bert-a", ["--gpus=1"], "model=bert-base batch_size=32 iterations=2000"),
    ("teama", "bert-b", ["--gpus=1"], "model=bert-base batch_size=32 iterations=2000"),
    ("teama", "lstm-a", ["--gpus=1"], "model=lstm batch_size=20 iterations=4000"),
    ("teama", "vgg16-a", ["--gpus=2"], "model=vgg16 batch_size=32 iterations=1500 gpus=2"),
    ("teamb", "transformer-b", ["--gpus=1"], "model=transformer batch_size=64 iterations=2000"),
    ("teamb", "resnet18-b", ["--gpus=1"], "model=resnet18 batch_size=128 iterations=3000"),
    ("teamb", "infer-mps-b", ["--gres=mps:50"],
     "model=resnet50 batch_size=8 mode=infer iterations=20000 mps=50"),
    ("teamb", "pinned-t4-b", ["--gpus=t4:1"], "model=resnet18 batch_size=64 iterations=1000"),
]


def _bin(name: str) -> str:
    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else name


class Demo:
    """Runs each step through one runner and narrates it."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        # always the local cluster's: a SLURM_CONF in the shell may name a real cluster, whose
        # queue the demo would fill with jobs and whose pending jobs its daemon would reorder
        conf = str(cluster_paths(None).slurm_conf)
        if os.environ.get("SLURM_CONF", conf) != conf:
            print(f"note: SLURM_CONF={os.environ['SLURM_CONF']} in this shell is not the local "
                  f"cluster's; the demo uses {conf}", file=sys.stderr, flush=True)
        self.runner = SubprocessRunner({"SLURM_CONF": conf})

    def step(self, title: str) -> None:
        print(f"\n=== {title}", flush=True)

    def run(self, argv: list[str], show: bool = True) -> CommandResult:
        if show:
            print("$ " + " ".join(argv), flush=True)
        res = self.runner.run(argv, timeout_s=300, cwd=str(self.workdir))
        if show:
            sys.stdout.write(res.stdout)
            sys.stderr.write(res.stderr)
        return res

    def submit(self) -> list[str]:
        ids = []
        for account, name, args, desc in WORKLOAD:
            script = self.workdir / f"{name}.sh"
            script.write_text(f"#!/bin/bash\n#SBATCH -J {name} -A {account} -t 60\n"
                              f"#HASE {desc}\nsleep 8\n")
            res = self.run([_bin("hsbatch"), "--parsable", "--begin=now+1hour", "-o", "/dev/null",
                            *args, str(script)], show=False)
            res.check()
            ids.append(res.stdout.strip().split(";")[0])
            print(f"  {name:14s} {account}  {' '.join(args):14s} #HASE {desc}  -> job {ids[-1]}")
        return ids

    def wait_done(self, ids: list[str], timeout_s: float = 180) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            res = self.run(["squeue", "-h", "-j", ",".join(ids), "-o", "%i"], show=False)
            if res.returncode == 0 and not res.stdout.strip():
                return
            time.sleep(2)
        print(f"  (still running after {timeout_s:.0f}s; continuing)")

    def wait_accounted(self, ids: list[str], timeout_s: float = 60) -> None:
        """Wait until slurmdbd has every job's end (it arrives after the job leaves squeue) and
        eligible time (a second or two later; until then `sacct -S` leaves the job out, and
        the report in step 6 would too)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            res = self.run(["sacct", "-X", "-n", "-P", "-j", ",".join(ids), "-o",
                            "State,Eligible"], show=False)
            rows = [ln.split("|") for ln in res.stdout.splitlines() if ln] if res.returncode == 0 else []
            if len(rows) == len(ids) and all(len(r) == 2 and r[0] not in UNFINISHED
                                             and r[1] != "Unknown" for r in rows):
                return
            time.sleep(1)
        print(f"  (accounting not complete after {timeout_s:.0f}s; continuing)")


UNFINISHED = {"PENDING", "RUNNING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED"}


def main() -> int:
    """Run the demo; 1 with `demo: error: ...` (no traceback) when a step's command fails, 2
    at once when there is no local cluster (Slurm's tools would retry its slurm.conf for a
    minute first)."""
    paths = cluster_paths(None)
    if not paths.slurm_conf.is_file():
        print(f"demo: error: no local cluster at {paths.root} ({paths.slurm_conf} does not "
              "exist); start it with `hase cluster up` (./run.sh demo does)", file=sys.stderr)
        return 2
    try:
        return _steps()
    except HaseError as exc:
        print(f"demo: error: {exc}\n(is the local cluster up? `hase cluster status` says; "
              "`hase cluster up` starts it)", file=sys.stderr)
        return 1


def _steps() -> int:
    workdir = Path(tempfile.mkdtemp(prefix="hase-demo-"))
    # the report in step 6 counts this demo's jobs, not the cluster's earlier ones (tests...)
    began = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 1))
    demo = Demo(workdir)
    config = workdir / "schedd.toml"
    config.write_text(f'[schedd]\nstate_db = "{workdir}/schedd.db"\nlog_format = "text"\n'
                      'nice_scale = 1100\n[policy]\nname = "fair"\n[policy.knobs]\ntheta = 0.2\n')
    try:
        demo.step("1. The cluster: 3 GPU types, MPS on every node")
        demo.run(["sinfo", "-o", "%P %N %G %f %T"]).check()
        demo.step("2. What the predictor says for one job on each GPU type")
        demo.run([_bin("hase"), "model", "predict", "--model", "resnet50", "--batch-size", "64",
                  "--iterations", "3000", "--gpu", "a100", "--gpu", "v100", "--gpu", "t4"])
        demo.step("3. Two accounts submit with hsbatch (begin in 1 h, so the daemon decides first)")
        ids = demo.submit()
        demo.step("4. One daemon cycle with policy 'fair': GPU-type constraints and Nice")
        demo.run([_bin("hase"), "schedd", "run", "--once", "--config", str(config)])
        demo.run(["squeue", "-j", ",".join(ids), "-o", "%.6i %.14j %.6a %.10f %.11y %.16b %.8T"])
        # what a user asks next: why is my job constrained (and ordered) like this?
        demo.run([_bin("hase"), "schedd", "job", ids[0], "--config", str(config)])
        demo.step("5. Let them start now; Slurm places them where the constraints allow")
        demo.run(["scontrol", "update", f"jobid={','.join(ids)}", "StartTime=now"]).check()
        demo.wait_done(ids)
        demo.wait_accounted(ids)
        demo.run(["sacct", "-X", "-j", ",".join(ids), "-o",
                  "JobID,JobName%14,Account,State,AllocTRES%50,NodeList"])
        demo.step("6. Fairness report from sacct: the jobs since the demo began")
        demo.run([_bin("hase"), "report", "fairness", "--since", began])
        demo.step("7. The same policies on a real trace in the simulator: 40 jobs of Gavel's "
                  "physical-cluster trace (MIT) on 4 K80 + 4 P100 + 4 V100")
        trace = Path(__file__).resolve().parents[2] / "tests/fixtures/sim/" \
            "gavel_max_min_fairness_excerpt.trace"
        # a small cluster, so the 40 jobs contend (on 96 GPUs every policy scores alike); one
        # command runs every policy on the same jobs and prints the table with ratios to fifo
        res = demo.run([_bin("hase"), "simulate", "--trace", str(trace),
                        *[a for p in ("fifo", "hase", "gavel", "fair") for a in ("--policy", p)],
                        "--gpus", "k80=4,p100=4,v100=4", "--no-plots", "--out",
                        str(workdir / "sim")], show=False)
        print("$ hase simulate --trace gavel_max_min_fairness_excerpt.trace --policy fifo "
              "--policy hase --policy gavel --policy fair --gpus k80=4,p100=4,v100=4")
        lines = res.stdout.splitlines()
        table = lines[lines.index("") + 1:] if "" in lines else [res.stderr.strip()]
        print("\n".join("  " + line for line in table))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print("\ndemo done: `hase --help` for everything else.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
