"""`hase simulate`'s results folder and messages: matplotlib checked first, results of an
earlier run named, the settings to repeat a run, refused jobs traced to the trace file, knobs
given twice, progress where stderr is no terminal, cluster and GPU type messages."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from slurm_hase.cli.sim_cmd import simulate
from slurm_hase.cli.sim_options import route_knobs
from slurm_hase.errors import ConfigError, name_some
from slurm_hase.sim.cluster import load_cluster, uniform_cluster
from slurm_hase.sim.engine import SimConfig
from slurm_hase.sim.engine import simulate as run_sim
from slurm_hase.sim.report import ProgressLines, check_speeds, stale_outputs
from slurm_hase.sim.throughput import ThroughputTable, load_throughputs
from slurm_hase.sim.traces import load_gavel
from tests.unit.test_sim_bad_input import TRACE, _hase, _sim_args
from tests.unit.test_sim_cli import _data_dir


@pytest.fixture()
def data(tmp_path: Path, fixtures_dir: Path) -> Path:
    return _data_dir(tmp_path, fixtures_dir)


@pytest.fixture(scope="module")
def table(fixtures_dir: Path) -> ThroughputTable:
    return load_throughputs(fixtures_dir / "sim" / "gavel_throughputs_excerpt.json")


def _run(fixtures_dir: Path, data: Path, out: Path, *extra: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(simulate, _sim_args(fixtures_dir, data, out, *extra)[1:])
    assert res.exit_code == 0, res.output
    return res.exit_code, res.stdout, res.stderr


def test_missing_matplotlib_is_refused_before_simulating(
        tmp_path: Path, fixtures_dir: Path, data: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` fails
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    out = tmp_path / "out"
    args = [a for a in _sim_args(fixtures_dir, data, out) if a != "--no-plots"]
    code, err = _hase(args, capsys)
    assert code == 2 and err == ("hase: error: plots need matplotlib: pip install matplotlib (or "
                                 "pass --no-plots)\n")
    assert not out.exists()
    code, _ = _hase([*args, "--no-plots"], capsys)  # without plots it runs
    assert code == 0 and (out / "fifo.json").is_file()


def test_results_of_an_earlier_run_are_named_and_left(tmp_path: Path, fixtures_dir: Path,
                                                     data: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "config.json").write_text("{}")  # not a policy's name: not hase's
    _, _, err = _run(fixtures_dir, data, out, "--policy", "fair")
    assert "warning" not in err
    _, _, err = _run(fixtures_dir, data, out, "--policy", "fifo")
    warning = next(line for line in err.splitlines() if line.startswith("hase: warning:"))
    assert err.count("hase: warning:") == 1
    assert (f"hase: warning: {out} also holds 3 result file(s) from an earlier run, not this "
            f"one: fair.json, fair_jobs.csv, fair_timeline.csv (this run's files are listed in "
            f"{out / 'run.json'})") in err
    run = json.loads((out / "run.json").read_text())
    assert run["files"] == ["fifo.json", "fifo_jobs.csv", "fifo_timeline.csv"]
    assert run["settings"]["policies"] == ["fifo"]
    assert (out / "notes.txt").read_text() == "mine" and (out / "fair.json").is_file()
    _, _, err = _run(fixtures_dir, data, out, "--policy", "fifo")  # the same run again
    assert [line for line in err.splitlines() if line.startswith("hase: warning:")] == [warning]


def test_seeds_json_of_an_earlier_repeat_run_is_named(tmp_path: Path, fixtures_dir: Path,
                                                     data: Path) -> None:
    out = tmp_path / "out"
    _run(fixtures_dir, data, out, "--jobs", "30", "--repeat", "2")
    _, _, err = _run(fixtures_dir, data, out, "--jobs", "30")
    assert (f"hase: warning: {out} also holds 3 result file(s) from an earlier run, not this "
            f"one: seed-0/, seed-1/, seeds.json (this run's files") in err
    assert (out / "seeds.json").is_file()  # named, not deleted


def test_stale_outputs_in_seed_folders_and_long_lists(tmp_path: Path) -> None:
    for name in ("seed-0/fifo.json", "seed-0/fair.json", "seed-7/fifo.json", "seeds.json",
                 "seed-1/x.txt", "hase_jobs.csv", "gavel_timeline.csv", "jct_cdf.svg",
                 "fairness.png", "run.json", "other.png"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("")
    written = [tmp_path / "seed-0" / "fifo.json", tmp_path / "seeds.json"]
    stale = stale_outputs(tmp_path, written)
    assert stale == ["fairness.png", "gavel_timeline.csv", "hase_jobs.csv", "jct_cdf.svg",
                     "seed-0/fair.json", "seed-7/"]
    assert name_some(stale) == ("fairness.png, gavel_timeline.csv, hase_jobs.csv, jct_cdf.svg, "
                                "seed-0/fair.json and 1 more")


def test_json_holds_the_settings_to_repeat_a_run(tmp_path: Path, fixtures_dir: Path,
                                                 data: Path) -> None:
    cluster = tmp_path / "c.toml"
    cluster.write_text('[[nodes]]\ncount = 2\ngpu_type = "v100"\ngpus = 4\n'
                       '[[accounts]]\nname = "acct0"\nshares = 2\n')
    common = ("--cluster", str(cluster), "--requeue-overhead", "30", "--checkpoint-share", "0.5")
    _, stdout, _ = _run(fixtures_dir, data, tmp_path / "one", *common, "--json")
    meta = json.loads(stdout)["meta"]
    assert meta["requeue_overhead_s"] == 30.0 and meta["checkpoint_share"] == 0.5
    assert meta["cluster"] == str(cluster) and meta["kind"] == "auto"
    assert meta["trace_kind"] == "gavel"
    assert meta["throughputs"] == str(data / "gavel" / "simulation_throughputs.json")
    spec = meta["cluster_spec"]
    assert spec["gpus_by_type"] == {"v100": 8} and spec["shares"] == {"acct0": 2.0}
    assert spec["node_groups"] == [{"gpu_type": "v100", "gpus": 4, "mps_per_gpu": 100,
                                    "features": ["v100"], "partitions": ["gpu"], "count": 2}]
    _, stdout, _ = _run(fixtures_dir, data, tmp_path / "two", *common, "--policy", "fifo",
                        "--policy", "fair", "--knob", "fair.theta=0.5", "--json")
    settings = json.loads(stdout)["settings"]
    assert settings["policies"] == ["fifo", "fair"]
    assert settings["knobs"] == {"fifo": {}, "fair": {"theta": 0.5}}
    assert {k: settings[k] for k in meta if k not in ("policy", "knobs")} == {
        k: v for k, v in meta.items() if k not in ("policy", "knobs")}
    _, stdout, _ = _run(fixtures_dir, data, tmp_path / "rep", *common, "--repeat", "2", "--json")
    doc = json.loads(stdout)
    assert doc["settings"]["repeat"] == 2 and doc["settings"]["requeue_overhead_s"] == 30.0
    assert doc == json.loads((tmp_path / "rep" / "seeds.json").read_text())


def test_refused_jobs_are_traced_to_the_trace_file(tmp_path: Path, fixtures_dir: Path,
                                                   data: Path) -> None:
    out = tmp_path / "out"
    _, _, err = _run(fixtures_dir, data, out, "--gpus", "v100=2")
    lines = (fixtures_dir / "sim" / TRACE).read_text().splitlines()
    big = [n for n, line in enumerate(lines, start=1) if int(line.split("\t")[6]) > 2]
    assert len(big) == 5
    assert (f"5 need more GPUs than the cluster has of any GPU type they may use (line {big[0]}, "
            f"line {big[1]}, line {big[2]} and 2 more) in {TRACE}\n") in err
    with (out / "fifo_jobs.csv").open() as fh:
        reader = csv.DictReader(fh)
        rows = list(reader)
    assert reader.fieldnames is not None and reader.fieldnames[-1] == "trace_source"
    assert reader.fieldnames[:3] == ["job_id", "account", "workload"]
    assert sorted(int(r["trace_source"].removeprefix("line ")) for r in rows
                  if r["state"] == "CANCELLED") == big


def test_a_knob_given_twice_is_refused(tmp_path: Path, fixtures_dir: Path, data: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code, err = _hase(_sim_args(fixtures_dir, data, out, "--policy", "fair", "--knob",
                                "theta=0.2", "--knob", "theta=0.9"), capsys)
    assert code == 2 and err == ("hase: error: --knob theta=0.9: knob 'theta' given twice (also "
                                 "as theta=0.2); give it once\n")
    assert not out.exists()


def test_unknown_knobs_offer_close_matches_and_specific_knobs_win() -> None:
    with pytest.raises(ConfigError, match=r"--knob thetaa=1: policy 'fair' has no knob 'thetaa'; "
                                          r"did you mean 'theta'\? \(knobs: fair: "):
        route_knobs(("fair",), {"thetaa": 1.0})
    with pytest.raises(ConfigError, match=r"none of fifo, fair has a knob 'thetta'; did you mean "
                                          r"'theta'\?"):
        route_knobs(("fifo", "fair"), {"thetta": 1.0})
    with pytest.raises(ConfigError, match=r"policy 'fair' has no knob 'thta'; did you mean"):
        route_knobs(("fifo", "fair"), {"fair.thta": 1.0})
    # POLICY.NAME over NAME, in either order
    assert route_knobs(("fair",), {"fair.theta": 0.5, "theta": 0.2}) == {"fair": {"theta": 0.5}}
    assert route_knobs(("fair",), {"theta": 0.2, "fair.theta": 0.5}) == {"fair": {"theta": 0.5}}


def test_progress_lines_at_most_every_interval() -> None:
    now = [100.0]
    said: list[str] = []
    lines = ProgressLines("fair", 100_000, said.append, every_s=10.0, clock=lambda: now[0])
    for t, done in ((104.0, 1000), (109.9, 1000), (110.0, 10_000), (112.0, 1000)):
        now[0] = t
        lines.update(done)
    assert said == ["fair: 12,000/100,000 jobs finished, 10 s"]
    now[0] = 195.0
    lines.finish()
    assert said[-1] == "fair: 13,000/100,000 jobs finished, 95 s"


def test_the_engine_reports_progress_every_percent_of_jobs(fixtures_dir: Path,
                                                           table: ThroughputTable) -> None:
    jobs = load_gavel(fixtures_dir / "sim" / TRACE, table, np.random.default_rng(0))
    spec = uniform_cluster({"k80": 4, "p100": 4, "v100": 4})
    calls: list[int] = []
    with_bar = run_sim(jobs, spec, table, SimConfig(policy="fair"), progress=calls.append)
    assert sum(calls) == 40 and len(calls) > 10  # 40 jobs: a call per finished job
    plain = run_sim(jobs, spec, table, SimConfig(policy="fair"))
    assert [(j.start, j.end, j.gpu_type) for j in with_bar.jobs] == [
        (j.start, j.end, j.gpu_type) for j in plain.jobs]


def test_progress_lines_where_stderr_is_no_terminal(tmp_path: Path, fixtures_dir: Path,
                                                    data: Path) -> None:
    _, _, err = _run(fixtures_dir, data, tmp_path / "out")
    assert "fifo: 40/40 jobs finished, " in err


def test_a_bad_hostlist_names_the_file_and_field(tmp_path: Path) -> None:
    p = tmp_path / "c.toml"
    for name in ("n-[1-", "n-[x]"):
        p.write_text(f'[[nodes]]\nname = "{name}"\ngpu_type = "v100"\ngpus = 4\n')
        with pytest.raises(ConfigError) as exc:
            load_cluster(p)
        assert str(exc.value).startswith(f"{p}: nodes[0].name: bad node name expression "
                                         f"'{name}': ")


def test_gpu_types_offered_are_ones_the_simulator_can_run(table: ThroughputTable) -> None:
    with pytest.raises(ConfigError) as exc:
        uniform_cluster({"v10O": 4}, where="--gpus", runnable=table.gpu_types)
    assert str(exc.value) == ("--gpus 'v10O=4': unknown GPU type 'v10O'; did you mean v100, "
                              "p100? (the simulator has measured speeds for k80, p100, v100)")
    spec = uniform_cluster({"Tesla V100-SXM2-32GB": 8}, runnable=table.gpu_types)
    with pytest.raises(ConfigError, match=r"v100m32: no measured speeds.*\(the same GPU "
                                          r"generation, to use instead: v100m32 -> v100\)"):
        check_speeds(spec, table)


def test_alibaba_pods_skipped_are_noted_once(tmp_path: Path, data: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    pods = tmp_path / "openb_pod_list_x.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
                    "creation_time,deletion_time,scheduled_time\n"
                    "c0,1,1,0,0,,BE,Running,0,100,10\n"
                    + "".join(f"g{i},1,1,1,1000,,LS,Running,{i},{600 + i},{i}\n" for i in range(4)))
    code, err = _hase(["simulate", "--trace", str(pods), "--data-dir", str(data), "--out",
                       str(tmp_path / "out"), "--no-plots", "--repeat", "2"], capsys)
    assert code == 0
    assert err.count("hase: note:") == 1 and (
        "hase: note: openb_pod_list_x.csv: 1 CPU-only pod and 0 never-scheduled pods were "
        "skipped (4 GPU pods kept)\n") in err
