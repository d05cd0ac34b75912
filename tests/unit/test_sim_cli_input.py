"""`hase simulate` refuses input it cannot simulate as asked, before simulating anything."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_hase.cli.main import main
from slurm_hase.cli.sim_cmd import simulate
from slurm_hase.errors import ConfigError
from slurm_hase.sim.admission import REFUSED_SIZE, REFUSED_SPEED, REFUSED_TYPES
from slurm_hase.sim.cluster import uniform_cluster
from slurm_hase.sim.report import refusals, throughput_table
from slurm_hase.sim.throughput import ThroughputTable
from slurm_hase.sim.traces import TraceJob
from tests.unit.test_sim_cli import _data_dir

TRACE = "gavel_max_min_fairness_excerpt.trace"  # 40 jobs: 23 on 1 GPU, 12 on 2, 5 on 4


@pytest.fixture()
def data(tmp_path: Path, fixtures_dir: Path) -> Path:
    return _data_dir(tmp_path, fixtures_dir)


def _args(fixtures_dir: Path, data: Path, out: Path, *extra: str) -> list[str]:
    return ["--trace", str(fixtures_dir / "sim" / TRACE), "--data-dir", str(data),
            "--out", str(out), "--no-plots", *extra]


def _hase(capsys: pytest.CaptureFixture[str], args: list[str]) -> tuple[int, str]:
    """Run `hase simulate ARGS` as the console script does: (exit code, stderr)."""
    with pytest.raises(SystemExit) as exc:
        main(["simulate", *args])
    code = exc.value.code
    return (code if isinstance(code, int) else 1), capsys.readouterr().err


@pytest.mark.parametrize(("gpus", "named"), [
    ("a100=8,h100=8", "a100, h100"),
    ("k80=4,a100=4", "a100:"),
])
def test_gpu_types_without_measured_speeds_are_refused(
        tmp_path: Path, fixtures_dir: Path, data: Path, capsys: pytest.CaptureFixture[str],
        gpus: str, named: str) -> None:
    out = tmp_path / "out"
    code, err = _hase(capsys, _args(fixtures_dir, data, out, "--gpus", gpus))
    assert code == 2
    assert err.startswith("hase: error: cluster GPU type(s) ") and named in err
    assert "k80, p100, v100" in err  # what the speed table has
    assert "jobs finished" not in err and not out.exists()


def test_a_trace_no_job_of_which_fits_is_refused(
        tmp_path: Path, fixtures_dir: Path, data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the excerpt's 16 multi-GPU jobs, on a single GPU
    lines = (fixtures_dir / "sim" / TRACE).read_text().splitlines()
    big = [line for line in lines if int(line.split("\t")[6]) >= 2]
    assert len(big) == 16
    trace = tmp_path / "big.trace"
    trace.write_text("\n".join(big) + "\n")
    out = tmp_path / "out"
    code, err = _hase(capsys, ["--trace", str(trace), "--gpus", "v100=1", "--data-dir", str(data),
                               "--out", str(out), "--no-plots"])
    assert code == 2
    assert err.startswith("hase: error: none of the 16 jobs can run on this cluster (GPUs: v100=1)")
    assert f"16 {REFUSED_SIZE}" in err and "k80, p100, v100" in err
    assert not out.exists()


def test_jobs_that_can_never_run_are_counted_and_warned_about(
        tmp_path: Path, fixtures_dir: Path, data: Path) -> None:
    out = tmp_path / "out"
    res = CliRunner().invoke(simulate, _args(fixtures_dir, data, out, "--gpus", "v100=2", "--json"))
    assert res.exit_code == 0, res.output
    assert (f"hase: warning: 5 of 40 jobs can never run on this cluster and are refused at "
            f"submission (as sbatch would): 5 {REFUSED_SIZE}") in res.stderr
    metrics = json.loads(res.stdout)["metrics"]
    assert metrics["refused"] == 5 and metrics["jobs"] == 35 and metrics["unfinished"] == 0
    with (out / "fifo_jobs.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    cancelled = [r for r in rows if r["state"] == "CANCELLED"]
    assert len(cancelled) == 5 and {r["num_gpus"] for r in cancelled} == {"4"}
    # a cluster every job fits on: no warning, nothing refused
    ok = CliRunner().invoke(simulate, _args(fixtures_dir, data, tmp_path / "ok",
                                            "--gpus", "v100=4", "--json"))
    assert ok.exit_code == 0, ok.output
    assert "warning" not in ok.stderr and json.loads(ok.stdout)["metrics"]["refused"] == 0


@pytest.mark.parametrize(("gpus", "message"), [
    ("k80=0", "--gpus 'k80=0': the GPU count must be a positive integer"),
    ("k80=-4", "--gpus 'k80=-4': the GPU count must be a positive integer"),
    ("v100=4,k80=0", "--gpus 'k80=0': the GPU count must be a positive integer"),
    ("k80=4,k80=8", "--gpus 'k80=8': GPU type 'k80' given twice"),
    ("v100=4,V100=4", "--gpus 'V100=4': GPU type v100 given twice (also as 'v100')"),
    ("k80", "--gpus 'k80': expected TYPE=N"),
    ("k80=4,", "--gpus '': expected TYPE=N"),
    ("k80=2.5", "--gpus 'k80=2.5': expected TYPE=N"),
])
def test_bad_gpus_entries_are_named(
        tmp_path: Path, fixtures_dir: Path, data: Path, capsys: pytest.CaptureFixture[str],
        gpus: str, message: str) -> None:
    code, err = _hase(capsys, _args(fixtures_dir, data, tmp_path / "out", "--gpus", gpus))
    assert code == 2 and err.startswith(f"hase: error: {message}") and err.count("\n") == 1


@pytest.mark.parametrize(("option", "value", "allowed"), [
    ("--start", "-3", "x>=0"),
    ("--jobs", "-5", "x>=1"),
    ("--jobs", "0", "x>=1"),
    ("--tile", "-5", "0<=x<=10000000"),
    ("--load", "0", "x>0.0"),
    ("--load", "-1", "x>0.0"),
    ("--load", "nan", "not a finite number"),
    ("--interval", "0", "1.0<=x<=86400.0"),
    ("--interval", "-5", "1.0<=x<=86400.0"),
    ("--seed", "-1", "x>=0"),
])
def test_out_of_range_options_are_refused(tmp_path: Path, fixtures_dir: Path, data: Path,
                                          option: str, value: str, allowed: str) -> None:
    out = tmp_path / "out"
    res = CliRunner().invoke(simulate, _args(fixtures_dir, data, out, option, value))
    assert res.exit_code == 2
    assert f"Invalid value for '{option}'" in res.output and allowed in res.output
    assert "simulating" not in res.output and not out.exists()


@pytest.mark.parametrize(("extra", "jobs"), [
    (["--start", "35"], 5),
    (["--jobs", "7"], 7),
    (["--start", "38", "--jobs", "7"], 2),
    (["--tile", "0"], 40),  # 0 = no tiling
    (["--tile", "50"], 50),
])
def test_trace_cuts_in_range_select_those_jobs(tmp_path: Path, fixtures_dir: Path, data: Path,
                                               extra: list[str], jobs: int) -> None:
    res = CliRunner().invoke(simulate, _args(fixtures_dir, data, tmp_path / "out", "--json", *extra))
    assert res.exit_code == 0, res.output
    metrics = json.loads(res.stdout)["metrics"]
    assert metrics["jobs"] == jobs and metrics["refused"] == 0


def test_a_start_past_the_trace_is_refused(tmp_path: Path, fixtures_dir: Path, data: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _hase(capsys, _args(fixtures_dir, data, tmp_path / "out", "--start", "40"))
    assert code == 2 and "--start 40: past the end of" in err and "(40 jobs, numbered from 0)" in err


@pytest.mark.parametrize(("extra", "message"), [
    (["--policy", "bogus"], "unknown policy 'bogus' (known: fair, fifo, gavel, hase)"),
    (["--policy", "fair", "--knob", "bogus=1"], "policy 'fair' has no knob 'bogus'"),
    (["--policy", "fair", "--knob", "theta=5"], "theta"),
])
def test_policy_and_knobs_are_checked_before_simulating(
        tmp_path: Path, fixtures_dir: Path, data: Path, capsys: pytest.CaptureFixture[str],
        extra: list[str], message: str) -> None:
    out = tmp_path / "out"
    code, err = _hase(capsys, _args(fixtures_dir, data, out, *extra))
    assert code == 2 and err.startswith("hase: error: ") and message in err
    assert "simulating" not in err and "jobs finished" not in err and not out.exists()


def test_uniform_cluster_refuses_bad_counts_and_repeated_types() -> None:
    with pytest.raises(ConfigError, match=r"gpus 'k80=0': the GPU count must be a positive"):
        uniform_cluster({"k80": 0})
    with pytest.raises(ConfigError, match=r"gpus 'k80=-4'"):
        uniform_cluster({"v100": 4, "k80": -4})
    with pytest.raises(ConfigError, match=r"GPU type v100 given twice"):
        uniform_cluster({"v100": 4, "V100": 4})
    with pytest.raises(ConfigError, match=r"no GPU types given"):
        uniform_cluster({})
    assert uniform_cluster({"V100": 6}).gpus_by_type == {"v100": 6}


def _job(job_id: str, workload: str, gpus: int, constraint: tuple[str, ...] = (),
         fraction: float = 1.0) -> TraceJob:
    return TraceJob(job_id, 0.0, "a", "a", gpus, 100.0, fraction, workload, constraint)


def test_refusals_names_each_reason(fixtures_dir: Path) -> None:
    table = throughput_table(fixtures_dir / "no-such-dir")  # the bundled Gavel table
    spec = uniform_cluster({"k80": 4, "v100": 2})
    rn = "ResNet-50 (batch size 64)"
    jobs = [_job("1", rn, 1), _job("2", rn, 4), _job("3", rn, 4, ("t4",)),
            _job("4", rn, 4, ("v100",)), _job("5", rn, 1, ("T4|v100",)), _job("6", rn, 8),
            _job("7", rn, 1, fraction=0.5)]
    assert refusals(jobs, spec, table) == {REFUSED_TYPES: 1, REFUSED_SIZE: 2}
    # a type the workload was never measured on cannot run it
    partial = ThroughputTable(isolated={"v100": {("A", 1): 2.0, ("B", 1): 1.0},
                                        "k80": {("B", 1): 0.5}}, colocated={})
    assert refusals([_job("1", "A", 1), _job("2", "B", 1)], uniform_cluster({"k80": 4}),
                    partial) == {REFUSED_SPEED: 1}
