"""`hase simulate` end to end on the packaged Gavel excerpt."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
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
    by_account = summary["metrics"]["by_account"]
    assert sum(a["jobs"] for a in by_account.values()) == 40
    assert all(type(a["jobs"]) is int for a in by_account.values())  # a count, not 10.0


def test_simulate_refuses_unknown_gpu_type(tmp_path: Path, fixtures_dir: Path) -> None:
    data = _data_dir(tmp_path, fixtures_dir)
    spec = tmp_path / "c.toml"
    spec.write_text('[[nodes]]\ncount = 2\ngpu_type = "v10O"\ngpus = 4\n')
    res = CliRunner().invoke(simulate, [
        "--trace", str(fixtures_dir / "sim" / "gavel_max_min_fairness_excerpt.trace"),
        "--cluster", str(spec), "--data-dir", str(data), "--out", str(tmp_path / "o")])
    assert res.exit_code != 0
    assert "did you mean" in str(res.exception)


def test_simulate_checkpoint_share_turns_rotation_on(tmp_path: Path, fixtures_dir: Path) -> None:
    data = _data_dir(tmp_path, fixtures_dir)
    trace = fixtures_dir / "sim" / "gavel_max_min_fairness_excerpt.trace"
    common = ["--trace", str(trace), "--gpus", "k80=4,p100=4,v100=4", "--policy", "fair",
              "--knob", "min_run_s=0", "--data-dir", str(data), "--no-plots"]
    counts = []
    for share in ("0", "1"):
        out = tmp_path / f"out{share}"
        res = CliRunner().invoke(simulate, [*common, "--checkpoint-share", share, "--out", str(out)])
        assert res.exit_code == 0, res.output
        metrics = json.loads((out / "fair.json").read_text())["metrics"]
        assert metrics["jobs"] == 40 and metrics["unfinished"] == 0
        counts.append(metrics["requeues"])
    assert counts[0] == 0 and counts[1] > 0
    bad = CliRunner().invoke(simulate, [*common, "--checkpoint-share", "1.5", "--out", str(tmp_path)])
    assert bad.exit_code == 2 and "checkpoint-share" in bad.output


def test_simulate_share_optin_lets_fair_pair_waiting_jobs(tmp_path: Path,
                                                         fixtures_dir: Path) -> None:
    data = _data_dir(tmp_path, fixtures_dir)
    trace = fixtures_dir / "sim" / "gavel_max_min_fairness_excerpt.trace"
    common = ["--trace", str(trace), "--gpus", "k80=4,p100=4,v100=4", "--policy", "fair",
              "--knob", "share_gain=1.0", "--knob", "share_level=0", "--data-dir", str(data),
              "--no-plots"]
    halves = []
    for share in ("0", "1"):
        out = tmp_path / f"out{share}"
        res = CliRunner().invoke(simulate, [*common, "--share-optin", share, "--out", str(out)])
        assert res.exit_code == 0, res.output
        summary = json.loads((out / "fair.json").read_text())
        assert summary["meta"]["share_optin"] == float(share)
        assert summary["metrics"]["jobs"] == 40 and summary["metrics"]["unfinished"] == 0
        rows = (out / "fair_jobs.csv").read_text().splitlines()
        col = rows[0].split(",").index("gpu_fraction")
        halves.append(sum(float(r.split(",")[col]) < 1.0 for r in rows[1:]))
    assert halves[0] == 0 and halves[1] > 0  # jobs the daemon turned into shares
    bad = CliRunner().invoke(simulate, [*common, "--share-optin", "2", "--out", str(tmp_path)])
    assert bad.exit_code == 2 and "share-optin" in bad.output


def test_simulate_ledger_half_life_is_used_and_checked(tmp_path: Path, fixtures_dir: Path) -> None:
    data = _data_dir(tmp_path, fixtures_dir)
    trace = fixtures_dir / "sim" / "gavel_max_min_fairness_excerpt.trace"
    common = ["--trace", str(trace), "--gpus", "k80=4,p100=4,v100=4", "--policy", "fair",
              "--data-dir", str(data), "--no-plots", "--out", str(tmp_path / "o")]
    res = CliRunner().invoke(simulate, [*common, "--ledger-half-life", "3600"])
    assert res.exit_code == 0, res.output
    meta = json.loads((tmp_path / "o" / "fair.json").read_text())["meta"]
    assert meta["ledger_half_life_s"] == 3600.0
    bad = CliRunner().invoke(simulate, [*common, "--ledger-half-life", "0"])
    assert bad.exit_code == 2 and "ledger-half-life" in bad.output


def test_simulate_refresh_is_used_and_checked(tmp_path: Path, fixtures_dir: Path) -> None:
    data = _data_dir(tmp_path, fixtures_dir)
    trace = fixtures_dir / "sim" / "gavel_max_min_fairness_excerpt.trace"
    common = ["--trace", str(trace), "--gpus", "k80=4,p100=4,v100=4", "--policy", "fair",
              "--data-dir", str(data), "--no-plots"]
    quiet = []
    for refresh in ("0", None):
        out = tmp_path / f"o{refresh}"
        res = CliRunner().invoke(simulate, [*common, "--out", str(out),
                                            *(["--refresh", refresh] if refresh else [])])
        assert res.exit_code == 0, res.output
        summary = json.loads((out / "fair.json").read_text())
        assert summary["meta"]["refresh_s"] == (0.0 if refresh else 600.0)
        quiet.append(summary["metrics"]["quiet_cycles"])
    assert quiet[0] == 0 and quiet[1] > 0
    bad = CliRunner().invoke(simulate, [*common, "--refresh", "-5", "--out", str(tmp_path)])
    assert bad.exit_code == 2 and "refresh" in bad.output


def test_simulate_without_shared_data_uses_the_bundled_gavel_throughputs(tmp_path: Path,
                                                                        fixtures_dir: Path) -> None:
    """A user's clone has no ../shared: the bundled copy of Gavel's table stands in."""
    from slurm_hase.sim.report import BUNDLED_THROUGHPUTS, throughput_path, throughput_table

    empty = tmp_path / "no-data"
    empty.mkdir()
    assert throughput_path(empty) == BUNDLED_THROUGHPUTS
    assert {"k80", "p100", "v100"} <= set(throughput_table(empty).gpu_types)
    out = tmp_path / "out"
    res = CliRunner().invoke(simulate, [
        "--trace", str(fixtures_dir / "sim" / "gavel_max_min_fairness_excerpt.trace"),
        "--policy", "fifo", "--data-dir", str(empty), "--out", str(out), "--no-plots"])
    assert res.exit_code == 0, res.output
    assert json.loads((out / "fifo.json").read_text())["metrics"]["jobs"] == 40
    # a data dir that has the file wins
    data = _data_dir(tmp_path, fixtures_dir)
    assert throughput_path(data) == data / "gavel" / "simulation_throughputs.json"


def test_bundled_gavel_throughputs_are_the_shared_file_byte_for_byte(shared_data: Path) -> None:
    from slurm_hase.sim.report import BUNDLED_THROUGHPUTS

    shared = shared_data / "gavel" / "simulation_throughputs.json"
    assert BUNDLED_THROUGHPUTS.read_bytes() == shared.read_bytes()


def test_gavel_trace_alias_without_a_data_dir_uses_the_bundled_trace(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pip install has no shared data: `--trace gavel` runs on the bundled msr trace, the
    unbundled aliases name what is missing and where it was looked for (HASE_DATA_DIR too)."""
    from slurm_hase.sim.report import BUNDLED_TRACES, resolve_trace

    empty = tmp_path / "no-data"
    empty.mkdir()
    assert resolve_trace("gavel", empty) == BUNDLED_TRACES["gavel"]
    provenance = (BUNDLED_TRACES["gavel"].parent / "PROVENANCE.md").read_text()
    digest = hashlib.sha256(BUNDLED_TRACES["gavel"].read_bytes()).hexdigest()
    assert f"`{BUNDLED_TRACES['gavel'].name}`" in provenance and digest in provenance
    out = tmp_path / "out"
    monkeypatch.setenv("HASE_DATA_DIR", str(empty))
    res = CliRunner().invoke(simulate, ["--trace", "gavel", "--jobs", "30", "--policy", "fifo",
                                        "--out", str(out), "--no-plots"])
    assert res.exit_code == 0, res.output
    assert json.loads((out / "fifo.json").read_text())["metrics"]["jobs"] == 30
    res = CliRunner().invoke(simulate, ["--trace", "philly", "--out", str(out), "--no-plots"])
    message = str(res.exception)  # a ConfigError: hase's main prints it as "hase: error: ..."
    assert "sia/philly_jobs_sia.csv is not in" in message and str(empty) in message
    assert "--data-dir" in message


def test_bundled_gavel_trace_is_the_shared_file_byte_for_byte(shared_data: Path) -> None:
    from slurm_hase.sim.report import BUNDLED_TRACES, TRACE_ALIASES, resolve_trace

    shared = shared_data / TRACE_ALIASES["gavel"]
    assert BUNDLED_TRACES["gavel"].read_bytes() == shared.read_bytes()
    assert resolve_trace("gavel", shared_data) == shared  # the data dir's copy wins


def test_simulate_json_prints_the_summary_file(tmp_path: Path, fixtures_dir: Path) -> None:
    data = _data_dir(tmp_path, fixtures_dir)
    out = tmp_path / "out"
    res = CliRunner().invoke(simulate, [
        "--trace", str(fixtures_dir / "sim" / "gavel_max_min_fairness_excerpt.trace"),
        "--gpus", "k80=4,p100=4,v100=4", "--policy", "fair", "--data-dir", str(data),
        "--out", str(out), "--no-plots", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc == json.loads((out / "fair.json").read_text())
    assert doc["metrics"]["jobs"] == 40 and doc["meta"]["policy"] == "fair"


def test_several_policies_on_the_same_jobs_compare_in_one_table(tmp_path: Path,
                                                                fixtures_dir: Path) -> None:
    """--policy repeated: each run is what it would be alone, one table with ratios to the
    first policy, --json the comparison, knobs routed by name or POLICY.NAME."""
    data = _data_dir(tmp_path, fixtures_dir)
    trace = str(fixtures_dir / "sim" / "gavel_max_min_fairness_excerpt.trace")
    common = ["--trace", trace, "--gpus", "k80=8,p100=8,v100=8", "--data-dir", str(data),
              "--no-plots"]
    alone = CliRunner().invoke(simulate, [*common, "--policy", "fair", "--knob", "theta=0.5",
                                          "--out", str(tmp_path / "alone"), "--json"])
    assert alone.exit_code == 0, alone.output
    both = CliRunner().invoke(simulate, [*common, "--policy", "fifo", "--policy", "fair",
                                         "--knob", "fair.theta=0.5", "--out",
                                         str(tmp_path / "both")])
    assert both.exit_code == 0, both.output
    lines = both.stdout.splitlines()
    header = next(i for i, ln in enumerate(lines) if ln.startswith("policy "))
    assert lines[header].split()[-3:] == ["JCT", "/", "fifo"]
    assert lines[header + 1].split()[0] == "fifo" and lines[header + 1].split()[-1] == "1.000"
    assert lines[header + 2].split()[0] == "fair"
    fair_alone = json.loads(alone.stdout)["metrics"]
    fair_both = json.loads((tmp_path / "both" / "fair.json").read_text())
    assert fair_both["meta"]["knobs"] == {"theta": 0.5}
    for key in ("avg_jct_s", "jain_accounts", "rho_p99", "updates"):
        assert fair_both["metrics"][key] == fair_alone[key]
    fifo = json.loads((tmp_path / "both" / "fifo.json").read_text())["metrics"]
    ratio = float(lines[header + 2].split()[-1])
    assert ratio == pytest.approx(fair_alone["avg_jct_s"] / fifo["avg_jct_s"], abs=5e-4)
    # who gains and who pays: one row per account, and the accounts' additions to the
    # average JCT sum to fair's change of it
    by = next(i for i, ln in enumerate(lines) if ln.startswith("account "))
    total = next(ln for ln in lines[by:] if ln.startswith("all "))
    assert float(total.split()[-1]) == pytest.approx(
        (fair_alone["avg_jct_s"] - fifo["avg_jct_s"]) / 3600, abs=1.5e-3)
    assert fair_both["metrics"]["by_account"] == fair_alone["by_account"]
    as_json = CliRunner().invoke(simulate, [*common, "--policy", "fifo", "--policy", "hase",
                                            "--out", str(tmp_path / "j"), "--json"])
    doc = json.loads(as_json.stdout)
    assert doc["baseline"] == "fifo" and doc["avg_jct_vs_baseline"]["fifo"] == 1.0
    assert set(doc["metrics"]) == {"fifo", "hase"}
    accounts = doc["accounts"]
    assert set(accounts) == set(doc["metrics"]["fifo"]["by_account"])
    assert sum(a["jobs"] for a in accounts.values()) == doc["metrics"]["fifo"]["jobs"]


@pytest.mark.parametrize(("args", "message"), [
    (["--policy", "fifo", "--policy", "hase", "--knob", "theta=0.2"],
     "--knob theta=0.2: none of fifo, hase has a knob 'theta'"),
    (["--policy", "fair", "--knob", "gavel.tolerance=0.5"],
     "--knob gavel.tolerance=0.5: 'gavel' is not a --policy here (fair)"),
    (["--policy", "fair", "--policy", "fair"], "--policy fair given twice"),
    (["--policy", "fair", "--knob", "fair.thetaa=1"], "policy 'fair' has no knob 'thetaa'"),
])
def test_knob_routing_refusals(tmp_path: Path, fixtures_dir: Path, args: list[str],
                               message: str) -> None:
    res = CliRunner().invoke(simulate, [
        "--trace", str(fixtures_dir / "sim" / "gavel_max_min_fairness_excerpt.trace"),
        "--out", str(tmp_path / "o"), *args])
    assert res.exit_code != 0
    assert message in str(res.exception)
    assert not (tmp_path / "o").exists()  # refused before any run


def test_repeat_runs_each_seed_alone_and_summarises_over_seeds(tmp_path: Path,
                                                               fixtures_dir: Path) -> None:
    """--repeat N: seed K's folder holds what --seed K alone writes; OUT/seeds.json and the
    table give each metric's mean and standard error, JCT ratios paired per seed."""
    data = _data_dir(tmp_path, fixtures_dir)
    trace = str(fixtures_dir / "sim" / "gavel_max_min_fairness_excerpt.trace")
    common = ["--trace", trace, "--gpus", "k80=4,p100=4,v100=4", "--data-dir", str(data),
              "--no-plots", "--policy", "fifo", "--policy", "fair"]
    res = CliRunner().invoke(simulate, [*common, "--seed", "3", "--repeat", "3",
                                        "--out", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "rep" / "seeds.json").read_text())
    assert doc["seeds"] == [3, 4, 5] and doc["baseline"] == "fifo"
    per_seed = {}
    for seed in (3, 4, 5):
        alone = CliRunner().invoke(simulate, [*common, "--seed", str(seed),
                                              "--out", str(tmp_path / f"alone{seed}")])
        assert alone.exit_code == 0, alone.output
        per_seed[seed] = {p: json.loads((tmp_path / f"alone{seed}" / f"{p}.json").read_text())
                          for p in ("fifo", "fair")}
        for p in ("fifo", "fair"):
            mine = json.loads((tmp_path / "rep" / f"seed-{seed}" / f"{p}.json").read_text())
            assert mine["metrics"]["avg_jct_s"] == per_seed[seed][p]["metrics"]["avg_jct_s"]
            assert mine["meta"]["seed"] == seed
    jcts = [per_seed[s]["fair"]["metrics"]["avg_jct_s"] for s in (3, 4, 5)]
    stat = doc["policies"]["fair"]["avg_jct_s"]
    assert stat["values"] == jcts and stat["mean"] == pytest.approx(sum(jcts) / 3)
    assert len(set(jcts)) > 1  # the seeds draw different jobs: a spread to measure
    mean = sum(jcts) / 3
    assert stat["se"] == pytest.approx((sum((j - mean) ** 2 for j in jcts) / 2 / 3) ** 0.5)
    ratios = [per_seed[s]["fair"]["metrics"]["avg_jct_s"]
              / per_seed[s]["fifo"]["metrics"]["avg_jct_s"] for s in (3, 4, 5)]
    assert doc["policies"]["fair"]["avg_jct_vs_baseline"]["values"] == pytest.approx(ratios)
    assert doc["policies"]["fifo"]["avg_jct_vs_baseline"]["se"] == 0.0
    lines = res.stdout.splitlines()
    assert lines[:4] == [str(tmp_path / "rep" / f"seed-{s}") for s in (3, 4, 5)] + [
        str(tmp_path / "rep" / "seeds.json")]
    row = next(ln for ln in lines if ln.startswith("fair "))
    assert f"{mean / 3600:.2f} +- " in row
    as_json = CliRunner().invoke(simulate, [*common, "--repeat", "2", "--json",
                                            "--out", str(tmp_path / "j")])
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout)["seeds"] == [0, 1]


def test_mean_se_of_one_value_has_no_error() -> None:
    from slurm_hase.sim.compare import mean_se

    assert mean_se([2.0]) == {"mean": 2.0, "se": None, "n": 1, "values": [2.0]}
    assert mean_se([1.0, 3.0])["se"] == pytest.approx(1.0)  # sd sqrt(2) / sqrt(2)
    assert mean_se([])["mean"] is None
