"""Predicted speeds for GPU types Gavel's table lacks (`hase simulate --predicted-speeds`)."""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from slurm_hase.cli.main import main
from slurm_hase.predict.api import Prediction
from slurm_hase.predict.descriptor import WorkloadDescriptor
from slurm_hase.predict.modelfile import load_predictor
from slurm_hase.sim.cluster import uniform_cluster
from slurm_hase.sim.engine import SimConfig, simulate
from slurm_hase.sim.predicted import predicted_meta, predicted_table
from slurm_hase.sim.throughput import ThroughputTable, load_throughputs
from slurm_hase.sim.traces import TraceJob
from tests.unit.test_sim_cli import _data_dir

R50 = "ResNet-50 (batch size 64)"
TRACE = "gavel_max_min_fairness_excerpt.trace"


@pytest.fixture(scope="module")
def table(fixtures_dir: Path) -> ThroughputTable:
    return load_throughputs(fixtures_dir / "sim" / "gavel_throughputs_excerpt.json")


class Halving:
    """A stand-in predictor: every job's iteration takes 1 s on a v100, `ratio` s on a100."""

    def __init__(self, ratio: float) -> None:
        self.ratio = ratio
        self.asked: list[WorkloadDescriptor] = []

    def predict(self, desc: WorkloadDescriptor, gpu_types: Sequence[str]
                ) -> Mapping[str, Prediction]:
        self.asked.append(desc)
        times = {"v100": 1.0, "a100": self.ratio}
        return {t: Prediction(t, times[t], times[t], None, None) for t in gpu_types}


def test_an_unmeasured_type_runs_each_job_type_at_its_v100_speed_times_the_predicted_ratio(
        table: ThroughputTable) -> None:
    out = predicted_table(table, ["a100", "v100"], Halving(0.5))
    assert out.predicted == ("a100",)
    v100 = table.isolated["v100"]
    assert out.isolated["a100"] == {key: 2.0 * tput for key, tput in v100.items() if tput > 0}
    assert out.isolated["v100"] == v100 and out.isolated["k80"] == table.isolated["k80"]
    assert table.predicted == () and "a100" not in table.isolated  # the input is left alone
    assert out.relative_speed("a100") == pytest.approx(2.0)


def test_each_job_type_is_asked_about_with_its_model_batch_size_and_scale() -> None:
    tiny = ThroughputTable(isolated={"v100": {(R50, 4): 3.0, ("A3C", 1): 5.0}}, colocated={})
    fake = Halving(0.25)
    out = predicted_table(tiny, ["a100"], fake)
    assert {(d.model, d.batch_size, d.num_gpus) for d in fake.asked} == {
        ("resnet50", 64, 4), ("a3c", 4, 1)}  # A3C at the batch Gavel measured it at
    assert out.isolated["a100"] == {(R50, 4): 12.0, ("A3C", 1): 20.0}


def test_sharing_an_unmeasured_type_slows_jobs_by_the_factors_measured_on_v100(
        table: ThroughputTable) -> None:
    out = predicted_table(table, ["a100"], Halving(0.5))
    pairs = [(a, b) for a, row in table.colocated["v100"].items() for b in row]
    assert len(pairs) > 10
    for a, b in pairs:
        assert out.pair_factor("a100", a, b) == pytest.approx(table.pair_factor("v100", a, b))
    some = pairs[0][0]
    assert out.mean_slowdown("a100", some) == pytest.approx(table.mean_slowdown("v100", some))


def test_a_table_that_measures_every_type_comes_back_as_it_is(table: ThroughputTable) -> None:
    fake = Halving(0.5)
    assert predicted_table(table, ["k80", "v100"], fake) is table
    assert fake.asked == []
    assert predicted_meta(table, "shipped") is None


def test_the_shipped_model_gives_an_a100_faster_and_a_t4_slower_than_the_v100(
        table: ThroughputTable) -> None:
    out = predicted_table(table, ["a100", "t4"], load_predictor())
    assert out.predicted == ("a100", "t4")
    assert out.relative_speed("a100") > 1.0 > out.relative_speed("t4") > 0.0
    # the same ratio the predictor gives for one job type, asked directly
    pred = load_predictor().predict(WorkloadDescriptor(model="resnet50", batch_size=64,
                                                       num_gpus=1), ["v100", "t4"])
    want = table.isolated["v100"][(R50, 1)] * pred["v100"].iter_time_p50 / pred["t4"].iter_time_p50
    assert out.isolated["t4"][(R50, 1)] == pytest.approx(want, rel=1e-12)
    meta = predicted_meta(out, "shipped")
    assert meta is not None and set(meta["median_vs_reference"]) == {"a100", "t4"}  # type: ignore[arg-type]


def test_a_job_on_a_predicted_type_runs_for_its_v100_runtime_over_the_predicted_speedup(
        table: ThroughputTable) -> None:
    out = predicted_table(table, ["a100"], Halving(0.5))
    job = TraceJob("1", 0.0, "a", "a", 1, 3600.0, 1.0, R50, ())
    res = simulate([job], uniform_cluster({"a100": 4}), out, SimConfig(policy="fair"))
    (done,) = res.jobs
    assert done.gpu_type == "a100"
    assert done.end - done.start == pytest.approx(1800.0)


def _hase(capsys: pytest.CaptureFixture[str], args: list[str]) -> tuple[int, str, str]:
    """`hase simulate ARGS` as the console script runs it: (exit code, stdout, stderr)."""
    try:
        main(["simulate", *args])
        code: object = 0
    except SystemExit as exc:
        code = exc.code or 0
    captured = capsys.readouterr()
    return (code if isinstance(code, int) else 1), captured.out, captured.err


def _args(fixtures_dir: Path, data: Path, out: Path, *extra: str) -> list[str]:
    return ["--trace", str(fixtures_dir / "sim" / TRACE), "--data-dir", str(data),
            "--out", str(out), "--no-plots", *extra]


def test_cli_simulates_a100_and_t4_with_predicted_speeds_and_says_so(
        tmp_path: Path, fixtures_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _data_dir(tmp_path, fixtures_dir)
    args = _args(fixtures_dir, data, tmp_path / "out", "--gpus", "a100=8,v100=8,t4=8",
                 "--policy", "fifo", "--policy", "fair", "--json")
    code, out, err = _hase(capsys, args)
    assert code == 2 and "--predicted-speeds" in err  # refused without it, with the way out
    code, out, err = _hase(capsys, [*args, "--predicted-speeds"])
    assert code == 0, err
    assert "a100, t4: no measured speeds; predicted by the shipped model" in err
    assert "median against the v100: a100 " in err
    doc = json.loads(out)
    record = doc["settings"]["predicted_speeds"]
    assert record["model"] == "shipped" and set(record["median_vs_reference"]) == {"a100", "t4"}
    jobs = (tmp_path / "out" / "fair_jobs.csv").read_text()
    assert "a100" in jobs and "t4" in jobs  # jobs ran on the predicted types
    again = _hase(capsys, [*args, "--predicted-speeds"])
    assert {p: {k: v for k, v in m.items() if k != "wall_s"} for p, m in
            json.loads(again[1])["metrics"].items()} == {
        p: {k: v for k, v in m.items() if k != "wall_s"} for p, m in doc["metrics"].items()}


def test_cli_model_needs_a_use_and_a_bad_one_is_refused_naming_the_option(
        tmp_path: Path, fixtures_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _data_dir(tmp_path, fixtures_dir)
    base = _args(fixtures_dir, data, tmp_path / "out", "--gpus", "a100=8")
    code, _, err = _hase(capsys, [*base, "--model", "shipped"])
    assert code == 2 and "--model without --predicted-speeds or --predictor model" in err
    missing = tmp_path / "no-such-model.json"
    code, _, err = _hase(capsys, [*base, "--predicted-speeds", "--model", str(missing)])
    assert code == 2 and err.startswith(f"hase: error: --model {missing}") and "Traceback" not in err
    not_a_model = tmp_path / "cluster.json"
    not_a_model.write_text('{"nodes": []}')
    code, _, err = _hase(capsys, [*base, "--predictor", "model", "--model", str(not_a_model)])
    assert code == 2 and "--model" in err and "not a slurm-hase model file" in err
    assert not (tmp_path / "out").exists()


def test_cli_model_file_serves_both_uses_and_is_recorded(
        tmp_path: Path, fixtures_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _data_dir(tmp_path, fixtures_dir)
    model = tmp_path / "site-model.json"
    model.write_bytes((Path(__file__).resolve().parents[2] / "slurm_hase" / "data" /
                       "predictor.json").read_bytes())
    code, out, err = _hase(capsys, _args(fixtures_dir, data, tmp_path / "out", "--gpus",
                                         "a100=8,v100=8", "--predicted-speeds", "--predictor",
                                         "model", "--model", str(model), "--json"))
    assert code == 0, err
    assert f"predicted by the model {model}" in err
    meta = json.loads(out)["meta"]
    assert meta["model"] == str(model) and meta["predicted_speeds"]["model"] == str(model)


def test_cli_with_predicted_speeds_a_typo_is_matched_against_every_catalog_type(
        tmp_path: Path, fixtures_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _data_dir(tmp_path, fixtures_dir)
    code, _, err = _hase(capsys, _args(fixtures_dir, data, tmp_path / "out", "--gpus",
                                       "h10=8", "--predicted-speeds"))
    assert code == 2 and "h100" in err and "measured speeds for" not in err


def test_cli_says_which_speeds_are_predicted_when_no_job_fits(
        tmp_path: Path, fixtures_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _data_dir(tmp_path, fixtures_dir)
    # job 30 of the excerpt (line 31) runs on 2 GPUs: it cannot run on one a100
    code, _, err = _hase(capsys, [*_args(fixtures_dir, data, tmp_path / "out", "--gpus",
                                         "a100=1", "--predicted-speeds"), "--start", "30",
                                  "--jobs", "1"])
    assert code == 2 and "none of the 1 jobs can run on this cluster" in err
    assert "measured speeds for k80, p100, v100 and predicted ones for a100" in err


def test_cli_notes_when_every_type_is_measured(
        tmp_path: Path, fixtures_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _data_dir(tmp_path, fixtures_dir)
    code, out, err = _hase(capsys, _args(fixtures_dir, data, tmp_path / "out", "--gpus",
                                         "k80=8,v100=8", "--predicted-speeds", "--json"))
    assert code == 0, err
    assert "hase: note: --predicted-speeds: every GPU type has measured speeds" in err
    assert json.loads(out)["meta"]["predicted_speeds"] is None


def test_simulated_jobs_are_described_as_the_predictor_was_trained_on_gavels_measurements() -> None:
    """Every Gavel job type and scale gets the model, batch size and GPUs of its training row
    (Recommendation is Gavel's recommendation model, not NCF; A3C and CycleGAN keep the batch
    Gavel measured them at), so predictions for simulated jobs are about the measured workload."""
    from slurm_hase.predict.loaders import _gavel_job
    from slurm_hase.sim.report import BUNDLED_THROUGHPUTS
    from slurm_hase.sim.workloads import job_type_descriptor

    keys = json.loads(BUNDLED_THROUGHPUTS.read_text())["v100"]
    assert len(keys) > 50
    for key in keys:
        job_type, sf = ast.literal_eval(key)  # "('ResNet-50 (batch size 64)', 2)"
        desc = job_type_descriptor(job_type, sf)
        assert (desc.model, desc.batch_size, desc.num_gpus) == _gavel_job(key), key


def test_a_type_the_model_has_no_rows_of_is_named_as_predicted_from_its_specs_alone(
        tmp_path: Path, fixtures_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _data_dir(tmp_path, fixtures_dir)
    # the shipped data has rows of the a100 (MLPerf) but none of the RTX 2080 Ti
    code, _, err = _hase(capsys, _args(fixtures_dir, data, tmp_path / "out", "--gpus",
                                       "a100=8,rtx2080ti=8", "--predicted-speeds"))
    assert code == 0, err
    assert "the model has no rows of rtx2080ti at all: it is predicted from catalog figures alone" in err
    code, _, err = _hase(capsys, _args(fixtures_dir, data, tmp_path / "out2", "--gpus",
                                       "a100=8,v100=8", "--predicted-speeds"))
    assert code == 0 and "no rows of" not in err
