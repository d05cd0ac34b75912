"""`hase simulate` writes its CSV results as UTF-8, as it reads traces, whatever the locale: an
account name that is not ASCII (a site's team "équipe") used to end a finished run with a
UnicodeEncodeError traceback under a non-UTF-8 locale, the jobs CSV cut off half written."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

ACCOUNTS = ("équipe", "团队")


def test_jobs_csv_is_utf8_under_an_ascii_locale(tmp_path: Path, shared_data: Path) -> None:
    rows = (shared_data / "sia" / "philly_jobs_sia.csv").read_text().splitlines()[:3]
    trace = tmp_path / "site.csv"
    trace.write_text("\n".join([rows[0], *(r.rsplit(",", 1)[0] + "," + team
                                          for r, team in zip(rows[1:], ACCOUNTS, strict=True))])
                     + "\n", encoding="utf-8")
    out = tmp_path / "out"
    # C locale without Python's UTF-8 coercion: open() without an encoding means ASCII
    env = {**os.environ, "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0",
           "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-c", "from slurm_hase.cli.main import main; main()",
                           "simulate", "--trace", str(trace), "--data-dir", str(shared_data),
                           "--out", str(out), "--no-plots", "--json"],
                          env=env, capture_output=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    with (out / "fifo_jobs.csv").open(encoding="utf-8", newline="") as fh:
        accounts = {row["account"] for row in csv.DictReader(fh)}
    assert accounts == {f"vc-{team}" for team in ACCOUNTS}
    assert (out / "run.json").is_file()
