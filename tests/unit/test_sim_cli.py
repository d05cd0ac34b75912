"""`hase simulate` end to end on the packaged Gavel excerpt."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from slurm_hase.cli.sim_cmd import simulate


def _data_dir(tmp_path: Path, fixtures_dir: Path) -> Path:
    data = tmp_path / "data"
    (data / "gavel").mkdir(parents=True)
    shutil.copy(fixtures_dir / "sim" / "gavel_throughputs_excerpt.json",
                data / "gavel" / "simulation_throughputs.json")
    return data


def test_simulate_writes_json_csv(tmp_path: Path, fixtures_dir: Path) -> None:
    data = _data_dir(tmp_path, fixtures_dir)
    out = tmp_path / "out dir; $(x)"
    trace = fixtures_dir / "sim" / "gavel_max_min_fairness_excerpt.trace"
    res = CliRunner().invoke(simulate, [
        "--trace", str(trace), "--gpus", "k80=8,p100=8,v100=8", "--policy", "fair",
        "--knob", "theta=0.2", "--data-dir", str(data), "--out", str(out), "--no-plots"])
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "fair.json").read_text())
    assert summary["metrics"]["jobs"] == 40 and summary["meta"]["knobs"] == {"theta": 0.2}
    assert (out / "fair_jobs.csv").read_text().count("\n") == 41


def test_simulate_refuses_unknown_gpu_type(tmp_path: Path, fixtures_dir: Path) -> None:
    data = _data_dir(tmp_path, fixtures_dir)
    spec = tmp_path / "c.toml"
    spec.write_text('[[nodes]]\ncount = 2\ngpu_type = "v10O"\ngpus = 4\n')
    res = CliRunner().invoke(simulate, [
        "--trace", str(fixtures_dir / "sim" / "gavel_max_min_fairness_excerpt.trace"),
        "--cluster", str(spec), "--data-dir", str(data), "--out", str(tmp_path / "o")])
    assert res.exit_code != 0
    assert "did you mean" in str(res.exception)
