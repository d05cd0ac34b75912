"""The README's main job (`./run.sh demo`) runs end to end on the local cluster."""

from __future__ import annotations

import re
import sys

from slurm_hase.slurm.runner import SubprocessRunner


def test_demo_runs_every_step(slurm_runner: SubprocessRunner) -> None:
    res = slurm_runner.run([sys.executable, "-m", "slurm_hase.cli.demo"], timeout_s=400)
    assert res.returncode == 0, res.stderr[-2000:]
    out = res.stdout
    for step in range(1, 8):
        assert f"=== {step}." in out
    # "10 of N pending jobs (...)" where other, held jobs are in the queue too
    cycle = re.search(r"# policy fair: (\d+) updates for 10 (?:of \d+ )?pending jobs"
                      r"(?: \([^)]*\))?, 0 errors", out)
    assert cycle is not None and int(cycle[1]) >= 5  # constraints/Nice really set by the daemon
    step4 = out.split("=== 4.")[1].split("=== 5.")[0]
    assert "Features=" in step4
    assert "mps:50" in step4.split("$ squeue")[1]  # squeue's columns wide enough to read
    why = step4.split("schedd job")[1]  # the first job's record in the daemon's store
    assert re.search(r"update +-?\d+ +\S+ +applied +fair: \d+ of 10 in the fair order; routed \w+", why), why
    sacct = out.split("=== 5.")[1].split("=== 6.")[0]
    assert sacct.count("COMPLETED") == 10, out.split("=== 4.")[1].split("=== 6.")[0]
    assert "gres/gpu:t4=1" in sacct.split("pinned-t4-b")[1].splitlines()[0]  # user's type kept
    assert "Jain's fairness index" in out
    report = out.split("=== 6.")[1].split("=== 7.")[0]
    jobs = {m[0]: int(m[1]) for m in re.findall(r"^(teama|teamb) +(\d+) ", report, re.M)}
    assert jobs.get("teama", 0) >= 6 and jobs.get("teamb", 0) >= 4, report  # the demo's own
    assert "--since 20" in report  # the demo's start, not a fixed look-back over older jobs
    sim = out.split("=== 7.")[1]
    rows = {m[0]: m[1] for m in re.findall(r"^  (fifo|hase|gavel|fair) +([\d.]+) ", sim, re.M)}
    assert set(rows) == {"fifo", "hase", "gavel", "fair"}, sim
    assert re.search(r"^  fifo .* 1\.000$", sim, re.M), sim  # the ratio column, fifo = 1
    # the simulated cluster is small enough for the policies to differ
    assert len(set(rows.values())) > 1, sim
