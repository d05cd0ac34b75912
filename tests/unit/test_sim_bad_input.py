"""`hase simulate` on bad input: a clear error naming the file, row, column, table or option,
exit code 2, and nothing simulated; warnings where the cut silently leaves fewer jobs."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from slurm_hase.cli.sim_cmd import simulate
from slurm_hase.errors import ConfigError, DataError
from slurm_hase.sim.cluster import MAX_GPUS_PER_TYPE, load_cluster, uniform_cluster
from slurm_hase.sim.engine import SimConfig, check_input
from slurm_hase.sim.report import TraceSetup, prepare_out, prepare_trace
from slurm_hase.sim.throughput import ThroughputTable, load_throughputs
from slurm_hase.sim.traces import MAX_SECONDS, load_alibaba, load_gavel, load_philly, load_trace
from tests.conftest import run_main
from tests.unit.test_sim_cli import _data_dir

TRACE = "gavel_max_min_fairness_excerpt.trace"  # 40 jobs
PHILLY_HEAD = "timestamp,duration,num_gpus,gpu_time,cluster\n"
ALIBABA_HEAD = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
                "creation_time,deletion_time,scheduled_time\n")
NOT_UTF8 = b"\xff\xfe\x00 not text\n"


@pytest.fixture(scope="module")
def table(fixtures_dir: Path) -> ThroughputTable:
    return load_throughputs(fixtures_dir / "sim" / "gavel_throughputs_excerpt.json")


@pytest.fixture()
def data(tmp_path: Path, fixtures_dir: Path) -> Path:
    return _data_dir(tmp_path, fixtures_dir)


def _hase(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """`hase ARGV` as the console script runs it: (exit code, stderr)."""
    code, _, err = run_main(argv, capsys)
    return code, err


def _sim_args(fixtures_dir: Path, data: Path, out: Path, *extra: str) -> list[str]:
    return ["simulate", "--trace", str(fixtures_dir / "sim" / TRACE), "--data-dir", str(data),
            "--out", str(out), "--no-plots", *extra]


def _gavel_row(steps: str = "925982", arrival: str = "0", sf: str = "1") -> str:
    return f"ResNet-18 (batch size 128)\tx\tx\tx\t1\t{steps}\t{sf}\t1\t-1.000000\t{arrival}\n"


# 1. bytes that are not UTF-8

def test_traces_that_are_not_utf8_are_data_errors(tmp_path: Path, table: ThroughputTable) -> None:
    rng = np.random.default_rng(0)
    for name, kind in (("bin.trace", "gavel"), ("bin.csv", "philly"), ("pods.csv", "alibaba")):
        path = tmp_path / name
        path.write_bytes(NOT_UTF8)
        with pytest.raises(DataError, match=rf"{name}: line 1: not UTF-8 text \(byte 0xff at "
                                            r"offset 0\)"):
            load_trace(path, table, rng, kind)
    # bad bytes past the header, deep in the file, too: named by the file's line and offset
    path = tmp_path / "late.csv"
    good = PHILLY_HEAD.encode() + b"2017-10-01 00:00:00,60,1,60,aa\n" * 5000
    path.write_bytes(good + b"2017-10-01 00:00:00,60,1,60,\xe9t\xe9\n")
    offset = len(good) + len(b"2017-10-01 00:00:00,60,1,60,")
    with pytest.raises(DataError, match=rf"late.csv: line 5002: not UTF-8 text \(byte 0xe9 at "
                                        rf"offset {offset}\)"):
        load_philly(path, table, rng)
    path = tmp_path / "late.trace"  # a Gavel trace likewise
    path.write_bytes(_gavel_row().encode() * 3 + b"\xe9" + _gavel_row().encode())
    with pytest.raises(DataError, match="late.trace: line 4: not UTF-8 text"):
        load_gavel(path, table, rng)


def test_cluster_files_that_are_not_utf8_are_config_errors(
        tmp_path: Path, fixtures_dir: Path, data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "c_bin.toml"
    bad.write_bytes(NOT_UTF8)
    with pytest.raises(ConfigError, match="c_bin.toml: not UTF-8 text"):
        load_cluster(bad)
    code, err = _hase(_sim_args(fixtures_dir, data, tmp_path / "out", "--cluster", str(bad)), capsys)
    assert code == 2 and err.startswith(f"hase: error: {bad}: not UTF-8 text")
    code, err = _hase(["cluster", "status", "--spec", str(bad)], capsys)
    assert code == 2 and err.startswith(f"hase: error: {bad}: not UTF-8 text")


def test_simulate_on_a_binary_trace_exits_2(tmp_path: Path, data: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bin.trace"
    bad.write_bytes(NOT_UTF8)
    for kind in ("auto", "philly"):
        code, err = _hase(["simulate", "--trace", str(bad), "--trace-kind", kind, "--data-dir",
                           str(data), "--out", str(tmp_path / "out"), "--no-plots"], capsys)
        assert code == 2 and err == f"hase: error: {bad}: line 1: not UTF-8 text (byte 0xff at " \
                                    "offset 0)\n"


# 2. short rows and GPU counts that are not whole numbers

def test_a_short_philly_row_names_the_row_and_the_missing_column(
        tmp_path: Path, table: ThroughputTable) -> None:
    p = tmp_path / "p.csv"
    p.write_text(PHILLY_HEAD + "2017-10-09 07:01:55,66.0,1,66.0,11cb48\n2017-10-09 06:13:03,20,1\n")
    with pytest.raises(DataError, match=r"p.csv: line 3: column 'cluster': missing \(the row has 3 "
                                        r"of the header's 5 columns\)"):
        load_philly(p, table, np.random.default_rng(0))
    p.write_text(PHILLY_HEAD + "2017-10-09 06:13:03\n")
    with pytest.raises(DataError, match="line 2: column 'duration': missing"):
        load_philly(p, table, np.random.default_rng(0))


def test_a_short_alibaba_row_names_the_missing_column(tmp_path: Path, table: ThroughputTable) -> None:
    p = tmp_path / "pods.csv"
    p.write_text(ALIBABA_HEAD + "p0,1,1,1,1000,,LS,Running,0,100,10\np1,1,1,1,1000,,LS,Running,0,100\n")
    with pytest.raises(DataError, match="line 3: column 'scheduled_time': missing"):
        load_alibaba(p, table, np.random.default_rng(0))


@pytest.mark.parametrize("gpus", ["0.5", "1.7", "3.9", "0", "-2", "1e9", "nan", "two"])
def test_philly_gpu_counts_must_be_whole_numbers(tmp_path: Path, table: ThroughputTable,
                                                 gpus: str) -> None:
    p = tmp_path / "p.csv"
    p.write_text(PHILLY_HEAD + f"2017-10-09 07:01:55,66.0,{gpus},66.0,11cb48\n")
    with pytest.raises(DataError, match=rf"line 2: column 'num_gpus': must be a whole number from 1 "
                                        rf"to 1,000,000, got '{gpus}'"):
        load_philly(p, table, np.random.default_rng(0))


def test_whole_gpu_counts_written_as_floats_still_load(tmp_path: Path, table: ThroughputTable) -> None:
    p = tmp_path / "p.csv"
    p.write_text(PHILLY_HEAD + "2017-10-09 07:01:55,66.0,2.0,66.0,11cb48\n")
    assert load_philly(p, table, np.random.default_rng(0))[0].num_gpus == 2


def test_gavel_scale_factor_and_alibaba_gpus_must_be_whole(tmp_path: Path,
                                                           table: ThroughputTable) -> None:
    p = tmp_path / "t.trace"
    p.write_text(_gavel_row(sf="1.5"))
    with pytest.raises(DataError, match="line 1: column 'scale_factor': must be a whole number"):
        load_gavel(p, table, np.random.default_rng(0))
    p = tmp_path / "pods.csv"
    p.write_text(ALIBABA_HEAD + "p0,1,1,0.5,1000,,LS,Running,0,100,10\n")
    with pytest.raises(DataError, match="line 2: column 'num_gpu': must be a whole number from 0"):
        load_alibaba(p, table, np.random.default_rng(0))


# 3. absurd numbers: refused before they hang the event loop or fill the memory

@pytest.mark.parametrize(("row", "column"), [
    (_gavel_row(arrival="1e300"), "arrival_time"),
    (_gavel_row(steps="1e300"), "total_steps"),
    (_gavel_row(arrival="inf"), "arrival_time"),
])
def test_gavel_times_past_the_limit_are_refused(tmp_path: Path, table: ThroughputTable,
                                                row: str, column: str) -> None:
    p = tmp_path / "t.trace"
    p.write_text(_gavel_row() + row)
    with pytest.raises(DataError, match=rf"line 2: column '{column}': .*(limit of 315,360,000 s "
                                        rf"\(10 years\)|not a finite number)"):
        load_gavel(p, table, np.random.default_rng(0))


def test_philly_durations_and_span_past_the_limit_are_refused(tmp_path: Path,
                                                              table: ThroughputTable) -> None:
    p = tmp_path / "p.csv"
    p.write_text(PHILLY_HEAD + "2017-10-09 07:01:55,1e300,1,0,a\n")
    with pytest.raises(DataError, match="line 2: column 'duration': 1e\\+300 is over the simulator"):
        load_philly(p, table, np.random.default_rng(0))
    p.write_text(PHILLY_HEAD + "2017-10-09 07:01:55,60,1,0,a\n9999-01-01 00:00:00,60,1,0,a\n")
    with pytest.raises(DataError, match=r"line 3: column 'timestamp': .* s after the first job's "
                                        r"\(line 2\), over the simulator's limit"):
        load_philly(p, table, np.random.default_rng(0))


def test_alibaba_times_past_the_limit_are_refused(tmp_path: Path, table: ThroughputTable) -> None:
    p = tmp_path / "pods.csv"
    p.write_text(ALIBABA_HEAD + "p0,1,1,1,1000,,LS,Running,0,1e300,10\n")
    with pytest.raises(DataError, match="line 2: column 'deletion_time': 1e\\+300 is over"):
        load_alibaba(p, table, np.random.default_rng(0))


def test_huge_gpu_counts_are_refused_before_building_the_cluster(
        tmp_path: Path, fixtures_dir: Path, data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _hase(_sim_args(fixtures_dir, data, tmp_path / "out", "--gpus", "k80=99999999999"),
                      capsys)
    assert code == 2 and err == ("hase: error: --gpus 'k80=99999999999': the GPU count must be "
                                 "at most 1,000,000 (the simulator's limit per GPU type)\n")
    assert uniform_cluster({"k80": MAX_GPUS_PER_TYPE}).gpus_by_type == {"k80": MAX_GPUS_PER_TYPE}


@pytest.mark.parametrize("node", [
    'count = 99999999999\ngpu_type = "v100"\ngpus = 1\n',
    'name = "v-[1-99999999999]"\ngpu_type = "v100"\ngpus = 1\n',
    'name = "a-[1-1000],b-[1-1000]x[1-1000]"\ngpu_type = "v100"\ngpus = 1\n',
])
def test_huge_node_groups_are_refused_before_expanding(tmp_path: Path, node: str) -> None:
    p = tmp_path / "c.toml"
    p.write_text("[[nodes]]\n" + node)
    with pytest.raises(ConfigError, match=r"c.toml: nodes\[0\]: [\d,]+ nodes: a cluster has at most "
                                          r"1,000,000"):
        load_cluster(p)


def test_too_many_gpus_of_a_type_in_a_cluster_file(tmp_path: Path) -> None:
    p = tmp_path / "c.toml"
    p.write_text('[[nodes]]\ncount = 3\ngpu_type = "v100"\ngpus = 400000\n')
    with pytest.raises(ConfigError, match="1,200,000 v100 GPUs: at most 1,000,000 per GPU type"):
        load_cluster(p)


def test_a_tiny_load_that_spreads_arrivals_past_the_limit_is_refused(
        fixtures_dir: Path, table: ThroughputTable) -> None:
    spec = uniform_cluster({"v100": 8})
    setup = TraceSetup(fixtures_dir / "sim" / TRACE, load=1e-12)
    with pytest.raises(ConfigError, match=r"--load 1e-12: the jobs arrive over [\d,]+ s, over the "
                                          r"simulator's limit of 315,360,000 s"):
        prepare_trace(setup, table, spec)
    assert prepare_trace(replace(setup, load=0.5), table, spec)  # a sane load is fine


def test_tile_beyond_its_maximum_is_refused(tmp_path: Path, fixtures_dir: Path, data: Path) -> None:
    out = tmp_path / "out"
    res = CliRunner().invoke(simulate, _sim_args(fixtures_dir, data, out, "--tile",
                                                 "10000000000")[1:])
    assert res.exit_code == 2 and "Invalid value for '--tile'" in res.output
    assert "0<=x<=10000000" in res.output and not out.exists()


def test_the_engine_refuses_jobs_it_could_never_finish_sampling(fixtures_dir: Path,
                                                                table: ThroughputTable) -> None:
    jobs = load_gavel(fixtures_dir / "sim" / TRACE, table, np.random.default_rng(0))
    check_input(jobs, SimConfig())  # a real trace passes
    with pytest.raises(ConfigError, match=r"job 3: submitted [\d,]+ s after job 1, over the "
                                          r"simulator's limit"):
        check_input([*jobs[:2], replace(jobs[2], submit_s=MAX_SECONDS * 2)], SimConfig())
    with pytest.raises(ConfigError, match="job 1: .* runtime inf s"):
        check_input([replace(jobs[0], duration_s=math.inf)], SimConfig())
    with pytest.raises(ConfigError, match="interval_s: nan"):
        check_input(jobs, SimConfig(interval_s=math.nan))


# 4. --out is checked before anything is simulated

@pytest.mark.parametrize(("where", "message"), [
    ("afile/sub", "afile is not a directory"),
    ("afile/a/b", "afile is not a directory"),
])
def test_an_out_under_a_file_is_refused_before_simulating(
        tmp_path: Path, fixtures_dir: Path, data: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, where: str, message: str) -> None:
    (tmp_path / "afile").write_text("x")
    out = tmp_path / where

    def no_run(*_: object, **__: object) -> None:
        raise AssertionError("simulated before checking --out")

    monkeypatch.setattr("slurm_hase.sim.engine.simulate", no_run)
    code, err = _hase(_sim_args(fixtures_dir, data, out), capsys)
    assert code == 2 and err == f"hase: error: --out {out}: {tmp_path / message}\n"


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
def test_an_out_that_cannot_be_created_is_refused() -> None:
    with pytest.raises(ConfigError, match="/proc/x: cannot write the results there"):
        prepare_out(Path("/proc/x"))


def test_prepare_out_creates_the_folder(tmp_path: Path) -> None:
    prepare_out(tmp_path / "a" / "b")
    assert (tmp_path / "a" / "b").is_dir() and not list((tmp_path / "a" / "b").iterdir())


# 5. cluster files: types, ranges and unknown keys, named by file, table and key

NODE = '[[nodes]]\nname = "k-[1-2]"\ngpu_type = "k80"\ngpus = 4\n'


@pytest.mark.parametrize(("text", "message"), [
    (NODE + '[[accounts]]\nname = "a"\nshares = -2\n',
     "accounts[0].shares: must be a positive finite number, got -2"),
    (NODE + '[[accounts]]\nname = "a"\nshares = nan\n', "accounts[0].shares: must be a positive"),
    (NODE + '[[accounts]]\nname = "a"\nshares = 0\n', "accounts[0].shares: must be a positive"),
    (NODE + '[[accounts]]\nname = "a"\nshares = "2"\n', "accounts[0].shares: must be a positive"),
    (NODE + '[[accounts]]\nname = "a"\nshares = true\n', "accounts[0].shares: must be a positive"),
    (NODE + '[[accounts]]\nname = "a"\nshare = 5\n',
     "accounts[0]: unknown key(s) 'share' (did you mean 'shares'?); known: name, shares, users"),
    (NODE + '[[accounts]]\nname = "a"\n[[accounts]]\nname = "a"\n',
     "accounts[1].name: account 'a' given twice"),
    (NODE + '[[accounts]]\nshares = 2\n', "accounts[0].name: missing or not a string"),
    (NODE + "[billing]\nk80 = -4.0\n", "billing.k80: must be a finite number >= 0, got -4.0"),
    (NODE + "[billing]\nv100 = inf\n", "billing.v100: must be a finite number >= 0, got inf"),
    (NODE + "[billing]\nv100 = true\n", "billing.v100: must be a finite number >= 0"),
    (NODE + "[billing]\nv100 = 1\nV100 = 2\n", "billing.V100: GPU type v100 given twice"),
    ("billing = 3\n" + NODE, "billing: must be a table"),
    ('colour = "blue"\n' + NODE, "unknown key(s) 'colour'; known: name, port_base"),
    (NODE + 'colour = "blue"\n', "nodes[0]: unknown key(s) 'colour'"),
    (NODE.replace("gpus = 4", "gpus = true"), "nodes[0].gpus: must be a positive integer, got true"),
    (NODE.replace("gpus = 4", "gpus = 4\nmps = true"), "nodes[0].mps: "),
    (NODE.replace('name = "k-[1-2]"', "count = true"), "nodes[0].count: must be a positive integer"),
    (NODE.replace('name = "k-[1-2]"', "name = 5"), "nodes[0].name: must be a string"),
    (NODE.replace('gpu_type = "k80"', ""), "nodes[0].gpu_type: missing or not a string"),
    (NODE + 'features = "ampere"\n', "nodes[0].features: must be a list of strings"),
    (NODE + '[[partitions]]\nname = "p"\ndefault = 1\n', "partitions[0].default: must be true"),
    (NODE + '[[partitions]]\nname = "p"\nnode = "ALL"\n',
     "partitions[0]: unknown key(s) 'node' (did you mean 'nodes'?)"),
    ("accounts = 3\n" + NODE, "accounts: must be a list of [[accounts]] tables"),
    ('partitions = ["gpu"]\n' + NODE, "partitions[0]: not a table"),
])
def test_bad_cluster_files_name_file_table_and_key(tmp_path: Path, text: str, message: str) -> None:
    p = tmp_path / "c.toml"
    p.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_cluster(p)
    assert str(exc.value).startswith(f"{p}: ") and message in str(exc.value)


def test_bad_shares_are_refused_by_hase_simulate(tmp_path: Path, fixtures_dir: Path, data: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "c.toml"
    p.write_text(NODE + '[[accounts]]\nname = "acct0"\nshares = -2\n')
    out = tmp_path / "out"
    code, err = _hase(_sim_args(fixtures_dir, data, out, "--cluster", str(p)), capsys)
    assert code == 2 and err == (f"hase: error: {p}: accounts[0].shares: must be a positive "
                                 "finite number, got -2\n")
    assert not out.exists()


def test_a_full_valid_cluster_file_still_loads(tmp_path: Path) -> None:
    p = tmp_path / "c.toml"
    p.write_text('name = "x"\nport_base = 16817\nslurmd_port_base = 17001\n' + NODE
                 + 'cpus = 8\nmemory_mb = 8000\nfeatures = ["kepler"]\nmps = 400\n'
                 '[[nodes]]\ncount = 2\ngpu_type = "v100"\ngpus = 8\n'
                 '[[partitions]]\nname = "gpu"\nnodes = "ALL"\ndefault = true\n'
                 '[[accounts]]\nname = "a"\nshares = 0.5\nusers = ["root"]\n'
                 '[[accounts]]\nname = "b"\n[billing]\nK80 = 1\nv100 = 4.5\n')
    spec = load_cluster(p)
    assert spec.gpus_by_type == {"k80": 8, "v100": 16}
    assert spec.shares == {"a": 0.5, "b": 1.0} and spec.billing == {"k80": 1.0, "v100": 4.5}
    assert spec.nodes[0].features == ("k80", "kepler") and spec.nodes[0].mps == 100


# 6. float options refuse nan and inf (the JSON summary stays valid JSON)

@pytest.mark.parametrize(("option", "value"), [
    ("--refresh", "nan"), ("--refresh", "inf"), ("--hsbatch-slack", "nan"),
    ("--hsbatch-slack", "inf"), ("--requeue-overhead", "inf"), ("--requeue-overhead", "nan"),
    ("--checkpoint-share", "nan"), ("--ledger-half-life", "nan"), ("--interval", "nan"),
])
def test_float_options_refuse_nan_and_inf(tmp_path: Path, fixtures_dir: Path, data: Path,
                                          option: str, value: str) -> None:
    out = tmp_path / "out"
    res = CliRunner().invoke(simulate, _sim_args(fixtures_dir, data, out, option, value)[1:])
    assert res.exit_code == 2, res.output
    assert f"Invalid value for '{option}': '{value}' is not a finite number." in res.output
    assert not out.exists()


def test_finite_float_options_still_give_valid_json(tmp_path: Path, fixtures_dir: Path,
                                                    data: Path) -> None:
    res = CliRunner().invoke(simulate, _sim_args(
        fixtures_dir, data, tmp_path / "out", "--policy", "fair", "--refresh", "0",
        "--hsbatch-slack", "1", "--requeue-overhead", "60", "--json")[1:])
    assert res.exit_code == 0, res.output
    meta = json.loads(res.stdout, parse_constant=lambda c: pytest.fail(f"{c} in JSON"))["meta"]
    assert meta["refresh_s"] == 0.0 and meta["hsbatch_slack"] == 1.0


# 8. a cut that leaves fewer jobs than asked is warned about (and simulated as before)

@pytest.mark.parametrize(("extra", "jobs", "warning"), [
    (["--start", "38", "--jobs", "20"], 2,
     "hase: warning: --jobs 20 from --start 38: the trace has 40 jobs, so only 2 are simulated"),
    (["--tile", "5", "--jobs", "20"], 5,
     "hase: warning: --tile 5 is below the 20 jobs taken from the trace: only the first 5 are "
     "simulated"),
    (["--tile", "5"], 5, "--tile 5 is below the 40 jobs taken from the trace"),
    (["--start", "30", "--jobs", "10"], 10, None),
    (["--tile", "50", "--jobs", "20"], 50, None),
])
def test_short_cuts_are_warned_about(tmp_path: Path, fixtures_dir: Path, data: Path,
                                     extra: list[str], jobs: int, warning: str | None) -> None:
    res = CliRunner().invoke(simulate, _sim_args(fixtures_dir, data, tmp_path / "out", "--json",
                                                 *extra)[1:])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["metrics"]["jobs"] == jobs
    if warning is None:
        assert "warning" not in res.stderr
    else:
        assert warning in res.stderr and res.stderr.count("hase: warning:") == 1


def test_prepare_trace_without_warn_is_silent_and_unchanged(fixtures_dir: Path,
                                                            table: ThroughputTable) -> None:
    spec = uniform_cluster({"v100": 8})
    setup = TraceSetup(fixtures_dir / "sim" / TRACE, start=38, count=20)
    said: list[str] = []
    assert prepare_trace(setup, table, spec) == prepare_trace(setup, table, spec, said.append)
    assert len(said) == 1 and "only 2 are simulated" in said[0]

