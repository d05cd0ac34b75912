"""hsbatch vs sbatch wall time on the local cluster, in the same run (target: p50 <= sbatch + 150 ms).

    python bench/hsbatch.py -n 30          # SLURM_CONF from the environment or `hase cluster env`

Shapes: ``plain`` (no description: hsbatch only scans the script), ``described`` (#HASE lines and
an untyped GPU: hsbatch reads nodes/partitions from Slurm, judges every type, adds --comment and
--constraint) and ``predicted`` (also a time limit and iterations, so the predictor runs; if it
cannot load, hsbatch fails open and this measures that path). Runs alternate sbatch / hsbatch;
every job is submitted held and cancelled at the end. Prints a table and one JSON line.

Besides wall time it reports CPU ms per call (user+sys of the child and its children), which a
busy host does not inflate the way it inflates wall time, and ``python`` = the bare interpreter
of this venv (``python -c pass``): the floor any Python wrapper pays.

The children run with this environment as it is. With ``PYTHONDONTWRITEBYTECODE=1`` and no
``__pycache__`` in the tree (a source checkout), every hsbatch run compiles each slurm_hase
module it imports from source; an installed package has its bytecode. ``--bytecode`` lets the
children cache bytecode in a temporary ``PYTHONPYCACHEPREFIX`` (the tree is not touched; the
dropped first round fills it), i.e. measures hsbatch as installed. The header says which.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slurm_hase.slurm.runner import CommandResult, SubprocessRunner  # noqa: E402

BUDGET_MS = 150.0
HEAD = "#!/bin/bash\n#SBATCH --hold -o /dev/null\n"
SHAPES: dict[str, str] = {
    "plain": HEAD + "#SBATCH -J bench-plain\nsleep 1\n",
    "described": HEAD + "#SBATCH -J bench-desc --gpus=1\n"
                 "#HASE params=7000 gflops=5000 precision=fp16\nsleep 1\n",
    "predicted": HEAD + "#SBATCH -J bench-pred --gpus=1 -t 30\n"
                 "#HASE model=resnet50 batch_size=64 iterations=20000\nsleep 1\n",
}


def slurm_conf() -> str | None:
    """SLURM_CONF from the environment, else from `hase cluster env`'s default paths."""
    if os.environ.get("SLURM_CONF"):
        return os.environ["SLURM_CONF"]
    try:
        from slurm_hase.slurm.localcluster.paths import cluster_paths

        conf = cluster_paths(None).slurm_conf  # type: ignore[attr-defined]
        return str(conf) if Path(conf).is_file() else None
    except Exception:
        return None


def hsbatch_argv() -> list[str]:
    exe = Path(sys.executable).with_name("hsbatch")
    return [str(exe)] if exe.is_file() else [sys.executable, "-m", "slurm_hase.hsbatch.cli"]


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=30, help="runs per tool and shape")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma list of " + ",".join(SHAPES))
    ap.add_argument("--bytecode", action="store_true",
                    help="let the children cache bytecode (temporary PYTHONPYCACHEPREFIX)")
    args = ap.parse_args()
    conf = slurm_conf()
    overlay = {"SLURM_CONF": conf} if conf else {}
    runner = SubprocessRunner(overlay)
    probe = runner.run(["sinfo", "-h", "-o", "%P"], timeout_s=10)
    if conf is None or probe.returncode != 0:
        print(f"SKIP: no local Slurm cluster answers (SLURM_CONF={conf}); run `hase cluster up`")
        return 0
    tools = {"sbatch": ["sbatch", "--parsable"], "hsbatch": [*hsbatch_argv(), "--parsable"]}
    results: dict[str, dict[str, list[float]]] = {}
    cpu: dict[str, dict[str, list[float]]] = {}
    job_ids: list[str] = []
    with tempfile.TemporaryDirectory(prefix="hsbatch-bench") as tmp:
        if args.bytecode:
            runner = SubprocessRunner({**overlay, "PYTHONDONTWRITEBYTECODE": "",
                                       "PYTHONPYCACHEPREFIX": str(Path(tmp) / "pycache")})
        try:
            for shape in args.shapes.split(","):
                script = Path(tmp) / f"{shape}.sh"
                script.write_text(SHAPES[shape])
                times: dict[str, list[float]] = {t: [] for t in [*tools, "python"]}
                cpus: dict[str, list[float]] = {t: [] for t in [*tools, "python"]}
                for i in range(args.n + 1):  # first round warms caches and is dropped
                    if i:
                        dt, dc = _timed(runner, [sys.executable, "-c", "pass"], tmp)[1:]
                        times["python"].append(dt)
                        cpus["python"].append(dc)
                    for tool, argv in tools.items():
                        r, dt, dc = _timed(runner, [*argv, str(script)], tmp)
                        if r.returncode != 0:
                            print(f"{tool} failed: {r.stderr.strip()}", file=sys.stderr)
                            return 1
                        job_ids.append(r.stdout.strip().split(";")[0])
                        if i:
                            times[tool].append(dt)
                            cpus[tool].append(dc)
                results[shape] = times
                cpu[shape] = cpus
        finally:
            for k in range(0, len(job_ids), 200):
                runner.run(["scancel", *job_ids[k:k + 200]], timeout_s=60)
    return report(results, cpu, args.n, bytecode_mode(args.bytecode))


def _timed(runner: SubprocessRunner, argv: list[str], cwd: str) -> tuple[CommandResult, float, float]:
    """(result, wall ms, CPU ms of the child tree)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = runner.run(argv, timeout_s=60, cwd=cwd)
    dt = (time.perf_counter() - t0) * 1000
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    dc = (r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) * 1000
    return r, dt, dc


def bytecode_mode(cached: bool) -> str:
    """How the children get slurm_hase's bytecode."""
    if cached:
        return "cached (--bytecode)"
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        return "compiled from source every run (PYTHONDONTWRITEBYTECODE is set)"
    return "as the tree has it (__pycache__ written when possible)"


def report(results: dict[str, dict[str, list[float]]], cpu: dict[str, dict[str, list[float]]],
           n: int, bytecode: str) -> int:
    ok = True
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; bytecode: {bytecode}")
    print(f"{'shape':<10} {'tool':<8} {'p50 ms':>8} {'p90 ms':>8} {'cpu p50':>8}   (n={n} each, same run)")
    summary: dict[str, dict[str, float]] = {}
    for shape, times in results.items():
        for tool, xs in times.items():
            print(f"{shape:<10} {tool:<8} {statistics.median(xs):8.1f} {pct(xs, 0.9):8.1f} "
                  f"{statistics.median(cpu[shape][tool]):8.1f}")
        diff50 = statistics.median(times["hsbatch"]) - statistics.median(times["sbatch"])
        diff90 = pct(times["hsbatch"], 0.9) - pct(times["sbatch"], 0.9)
        good = diff50 <= BUDGET_MS
        ok = ok and good
        print(f"{shape:<10} {'diff':<8} {diff50:+8.1f} {diff90:+8.1f}   "
              f"{'OK' if good else 'OVER'} (budget p50 +{BUDGET_MS:.0f} ms)")
        summary[shape] = {"sbatch_p50": statistics.median(times["sbatch"]),
                          "hsbatch_p50": statistics.median(times["hsbatch"]), "diff_p50": diff50,
                          "diff_p90": diff90, "python_p50": statistics.median(times["python"]),
                          "cpu_diff_p50": statistics.median(cpu[shape]["hsbatch"])
                          - statistics.median(cpu[shape]["sbatch"])}
    print(json.dumps({"bench": "hsbatch", "n": n, "ok": ok, "bytecode": bytecode, "shapes": summary}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
