"""A simulation that is never contended between accounts has no Jain's index to report: n/a in
the text and the table, null in the JSON, left out of means over seeds (not a perfect 1.000);
the text says why without claiming that no job waited."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.conftest import run_main
from tests.unit.test_sim_bad_input import _sim_args
from tests.unit.test_sim_cli import _data_dir

ROOMY = "k80=400,p100=400,v100=400"  # 40 jobs never wait for GPUs


@pytest.mark.parametrize(("gpus", "contended"), [(ROOMY, False), ("k80=4,p100=4,v100=4", True)])
def test_jain_is_n_a_only_when_never_contended(tmp_path: Path, fixtures_dir: Path, gpus: str,
                                               contended: bool,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    out, data = tmp_path / "out", _data_dir(tmp_path, fixtures_dir)
    code, text, _ = run_main(_sim_args(fixtures_dir, data, out,
                                       "--gpus", gpus, "--policy", "fifo", "--policy", "fair",
                                       "--repeat", "2"), capsys)
    assert code == 0
    seeds = json.loads((out / "seeds.json").read_text())
    for policy in ("fifo", "fair"):
        metrics = json.loads((out / "seed-0" / f"{policy}.json").read_text())["metrics"]
        jain = seeds["policies"][policy]["jain_accounts"]
        if contended:
            assert 0.0 < metrics["jain_accounts"] <= 1.0 and jain["n"] == 2
        else:
            assert metrics["jain_accounts"] is None and metrics["jain_accounts_1d"] is None
            assert jain == {"mean": None, "se": None, "n": 0, "values": []}
    code, text, _ = run_main(_sim_args(fixtures_dir, data, tmp_path / "one", "--gpus", gpus),
                             capsys)
    assert code == 0 and ("Jain n/a (never contended between accounts)" in text) is not contended


def test_one_account_with_a_queue_is_not_called_never_contended(
        tmp_path: Path, shared_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Ten real Philly rows, all given one account, on one V100: nine jobs queue for hours,
    yet there is no second account to compare, so Jain is n/a for that reason."""
    rows = (shared_data / "sia" / "philly_jobs_sia.csv").read_text().splitlines()[:11]
    trace = tmp_path / "one_account.csv"
    trace.write_text("\n".join([rows[0], *(r.rsplit(",", 1)[0] + ",teama" for r in rows[1:])])
                     + "\n")
    out = tmp_path / "out"
    code, text, _ = run_main(["simulate", "--trace", str(trace), "--gpus", "v100=1",
                              "--data-dir", str(shared_data), "--out", str(out), "--no-plots"],
                             capsys)
    assert code == 0
    with (out / "fifo_timeline.csv").open() as fh:
        assert max(int(row["pending"]) for row in csv.DictReader(fh)) >= 5  # a queue
    assert json.loads((out / "fifo.json").read_text())["metrics"]["jain_accounts"] is None
    assert "Jain n/a (never contended between accounts)" in text
