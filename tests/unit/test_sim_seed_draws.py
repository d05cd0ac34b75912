"""What `hase simulate --seed` draws, as its help and docs/simulator.md say: a Gavel trace's
accounts (it names the workloads), never the arrival times (there is no arrival jitter)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from slurm_hase.cli.sim_cmd import simulate
from slurm_hase.sim.cluster import uniform_cluster
from slurm_hase.sim.report import TraceSetup, prepare_trace
from slurm_hase.sim.throughput import load_throughputs
from tests.unit.test_sim_bad_input import TRACE


def test_seeds_draw_accounts_of_a_gavel_trace_not_its_arrivals(fixtures_dir: Path) -> None:
    table = load_throughputs(fixtures_dir / "sim" / "gavel_throughputs_excerpt.json")
    spec = uniform_cluster({"k80": 8, "p100": 8, "v100": 8})
    draws = [prepare_trace(TraceSetup(fixtures_dir / "sim" / TRACE, load=1.2, seed=seed), table,
                           spec) for seed in (0, 1)]
    assert [j.submit_s for j in draws[0]] == [j.submit_s for j in draws[1]]
    assert [j.workload for j in draws[0]] == [j.workload for j in draws[1]]
    assert [j.account for j in draws[0]] != [j.account for j in draws[1]]


def test_seed_help_promises_no_arrival_jitter() -> None:
    text = " ".join(CliRunner().invoke(simulate, ["--help"]).output.split())
    seed_help = text.split("--seed INTEGER RANGE", 1)[1].split("--repeat", 1)[0]
    assert "jitter" not in seed_help
    assert "Arrival times are the trace's whatever the seed" in seed_help
