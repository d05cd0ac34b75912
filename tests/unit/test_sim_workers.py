"""`hase simulate --workers N`: the runs in N processes give what one process gives, file for
file (wall time aside), with a line per finished run; a failing run stops the rest."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from slurm_hase.cli.sim_cmd import simulate
from slurm_hase.errors import PolicyError
from slurm_hase.sim.batch import RunTask, run_parallel
from slurm_hase.sim.cluster import uniform_cluster
from slurm_hase.sim.engine import SimConfig
from slurm_hase.sim.report import TraceSetup, prepare_trace, throughput_table
from tests.unit.test_sim_cli import _data_dir


def _without_wall(doc: Any) -> Any:
    """`doc` with every wall-clock field (the one thing runs may differ in) left out."""
    if isinstance(doc, dict):
        return {k: _without_wall(v) for k, v in doc.items() if k != "wall_s"}
    if isinstance(doc, list):
        return [_without_wall(v) for v in doc]
    return doc


def test_workers_give_the_same_files_as_one_process(tmp_path: Path, fixtures_dir: Path) -> None:
    data = _data_dir(tmp_path, fixtures_dir)
    trace = str(fixtures_dir / "sim" / "gavel_max_min_fairness_excerpt.trace")
    common = ["--trace", trace, "--gpus", "k80=4,p100=4,v100=4", "--data-dir", str(data),
              "--no-plots", "--policy", "fifo", "--policy", "fair", "--policy", "hase",
              "--repeat", "2"]
    one = CliRunner().invoke(simulate, [*common, "--out", str(tmp_path / "one")])
    many = CliRunner().invoke(simulate, [*common, "--workers", "3",
                                         "--out", str(tmp_path / "many")])
    assert one.exit_code == 0, one.output
    assert many.exit_code == 0, many.output
    names = sorted(p.relative_to(tmp_path / "one") for p in (tmp_path / "one").rglob("*"))
    assert names == sorted(p.relative_to(tmp_path / "many")
                           for p in (tmp_path / "many").rglob("*"))
    for name in names:
        a, b = tmp_path / "one" / name, tmp_path / "many" / name
        if a.is_dir():
            continue
        if a.suffix == ".json":
            doc_a, doc_b = json.loads(a.read_text()), json.loads(b.read_text())
            if name.name == "run.json":  # the files of each run, under its own folder
                doc_a, doc_b = json.dumps(doc_a).replace("/one", ""), json.dumps(doc_b).replace(
                    "/many", "")
            assert _without_wall(doc_a) == _without_wall(doc_b), name
        else:
            assert a.read_bytes() == b.read_bytes(), name
    # the same lines on stdout (files, the table), but for the folder's name
    assert one.stdout.replace("/one", "") == many.stdout.replace("/many", "")
    finished = [ln for ln in many.stderr.splitlines() if "jobs simulated in" in ln]
    assert sorted(ln.split(":")[0] for ln in finished) == sorted(
        f"{p} (seed {s})" for p in ("fifo", "fair", "hase") for s in (0, 1))


def _tasks(fixtures_dir: Path, tmp_path: Path, knobs: dict[str, float]) -> list[RunTask]:
    table = throughput_table(fixtures_dir / "no-such-dir")  # the bundled Gavel table
    spec = uniform_cluster({"k80": 4, "v100": 4})
    jobs = prepare_trace(TraceSetup(fixtures_dir / "sim" / "gavel_max_min_fairness_excerpt.trace",
                                    count=20), table, spec)
    return [RunTask((0, name), jobs, spec, table, SimConfig(policy=name, knobs=knobs),
                    tmp_path / name, {}) for name in ("fifo", "fair")]


def test_run_parallel_yields_every_run_and_raises_a_failed_one(tmp_path: Path,
                                                               fixtures_dir: Path) -> None:
    done = list(run_parallel(_tasks(fixtures_dir, tmp_path, {}), 2))
    assert sorted(d.key for d in done) == [(0, "fair"), (0, "fifo")]
    assert all(d.written[0].is_file() and d.out == tmp_path / d.key[1] for d in done)
    with pytest.raises(PolicyError, match="theta"):  # an error in a worker reaches the caller
        list(run_parallel(_tasks(fixtures_dir, tmp_path, {"theta": 7.0}), 2))
    with pytest.raises(ValueError, match="workers"):
        list(run_parallel([], 0))


def test_a_run_without_plots_sends_back_its_metrics_not_its_jobs(tmp_path: Path,
                                                                 fixtures_dir: Path) -> None:
    kept = _tasks(fixtures_dir, tmp_path / "kept", {})
    bare = [dataclasses.replace(t, out=tmp_path / "bare" / t.key[1], keep_result=False)
            for t in _tasks(fixtures_dir, tmp_path, {})]
    with_result = {d.key: d for d in run_parallel(kept, 2)}
    without = {d.key: d for d in run_parallel(bare, 2)}
    for key, done in without.items():
        result = with_result[key].result
        assert done.result is None and result is not None
        assert done.jobs == len(result.jobs) == 20
        assert _without_wall(done.metrics) == _without_wall(with_result[key].metrics)
        assert [p.name for p in done.written] == [p.name for p in with_result[key].written]
