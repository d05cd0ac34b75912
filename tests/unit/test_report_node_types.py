"""An MPS job's GPU type is guessed from the whole saved file, not from what --account or the
window select (a filter must not change the type an MPS job counts under)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from slurm_hase.cli.main import cli
from slurm_hase.reports.fairness import fairness_report
from slurm_hase.reports.window import stamp
from slurm_hase.slurm.parse_json_sacct import parse_sacct_json

DAY = 86400


def _saved(fixtures_dir: Path, tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """The 22.05 capture with done-a100 (the only typed job on a100-1, where done-mps ran) moved
    to teamb and one day earlier: neither `--account teama` nor a window of the last day sees it."""
    doc = json.loads((fixtures_dir / "slurm" / "22.05" / "sacct.json").read_text())
    by_name = {j["name"]: j for j in doc["jobs"]}
    typed, mps = by_name["done-a100"], by_name["done-mps"]
    assert typed["nodes"] == mps["nodes"] == "a100-1"
    typed["account"] = "teamb"
    for key in ("submission", "eligible", "start", "end"):
        typed["time"][key] -= DAY
    path = tmp_path / "saved.json"
    path.write_text(json.dumps(doc))
    return path, mps


@pytest.mark.usefixtures("utc")
@pytest.mark.parametrize("select", ["account", "window", "both"])
def test_mps_type_does_not_depend_on_the_filter(fixtures_dir: Path, tmp_path: Path,
                                                select: str) -> None:
    path, mps = _saved(fixtures_dir, tmp_path)
    since = ["--since", stamp(mps["time"]["submission"] - 3600)]
    opts = {"account": ["--account", "teama"], "window": since,
            "both": ["--account", "teama", *since]}[select]
    res = CliRunner().invoke(cli, ["report", "usage", "--input", str(path), "--json",
                                   "--weights", "none", *opts])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    [teama] = [a for a in data["accounts"] if a["account"] == "teama"]
    assert "mps" not in teama["gpu_hours"]
    assert teama["gpu_hours"]["a100"] == pytest.approx(0.5 * 1 / 3600, abs=1e-6)  # done-mps: 1 s
    assert "mps" not in data["gpu_types"]


def test_guess_from_other_records(fixtures_dir: Path) -> None:
    recs = parse_sacct_json((fixtures_dir / "slurm" / "22.05" / "sacct.json").read_text())
    mps_only = [r for r in recs if r.name == "done-mps"]
    assert fairness_report(mps_only).gpu_types == ["mps"]
    assert fairness_report(mps_only, guess_from=recs).gpu_types == ["a100"]
    # the types given (nodes()) win over the guess
    assert fairness_report(mps_only, guess_from=recs, node_types={"a100-1": "h100"}).gpu_types == ["h100"]
