"""The demo (`python -m slurm_hase.cli.demo`, ./run.sh demo) without a working local cluster:
a one-line `demo: error:` saying what to do, not a traceback (nor a minute of Slurm retries)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from slurm_hase.cli import demo


def test_without_a_local_cluster_the_demo_says_how_to_start_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HASE_CLUSTER_DIR", str(tmp_path / "cluster"))  # never started here
    began = time.monotonic()
    assert demo.main() == 2
    # before: sinfo retried the missing slurm.conf for 60 s, then a SlurmCommandError traceback
    assert time.monotonic() - began < 10
    err = capsys.readouterr().err
    assert err == (f"demo: error: no local cluster at {tmp_path / 'cluster'} "
                   f"({tmp_path / 'cluster' / 'etc' / 'slurm.conf'} does not exist); start it "
                   "with `hase cluster up` (./run.sh demo does)\n")


def test_a_failing_step_is_one_error_line_not_a_traceback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "cluster" / "etc" / "slurm.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text("ClusterName=hase\n")
    monkeypatch.setenv("HASE_CLUSTER_DIR", str(tmp_path / "cluster"))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # no Slurm client here: sinfo is missing
    assert demo.main() == 1
    err = capsys.readouterr().err.splitlines()
    assert err[-2].startswith("demo: error: sinfo ")
    assert err[-1] == ("(is the local cluster up? `hase cluster status` says; `hase cluster up` "
                       "starts it)")
