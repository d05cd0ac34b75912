"""`hase simulate --load` on cuts with no or little arrival span.

Gavel's physical-cluster traces submit their first jobs together (arrival 0); the excerpt's
first 24 jobs do. Rescaling arrival times cannot change the load of such a cut, so it is
refused: a run that recorded `load` in its settings would describe a load never simulated.
A cut arriving within less than a second gets the load asked, not a multiple of it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from slurm_hase.errors import ConfigError
from slurm_hase.sim.cluster import uniform_cluster
from slurm_hase.sim.report import TraceSetup, capacity, prepare_trace
from slurm_hase.sim.throughput import ThroughputTable, load_throughputs
from slurm_hase.sim.traces import offered_load
from tests.unit.test_sim_bad_input import TRACE, _hase, _sim_args
from tests.unit.test_sim_cli import _data_dir

GPUS = {"k80": 8, "p100": 8, "v100": 8}


@pytest.fixture(scope="module")
def table(fixtures_dir: Path) -> ThroughputTable:
    return load_throughputs(fixtures_dir / "sim" / "gavel_throughputs_excerpt.json")


def test_load_on_jobs_arriving_together_is_refused(tmp_path: Path, fixtures_dir: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    data = _data_dir(tmp_path, fixtures_dir)
    out = tmp_path / "out"
    code, err = _hase(_sim_args(fixtures_dir, data, out, "--jobs", "5", "--load", "0.5"), capsys)
    assert code == 2
    assert err.startswith("hase: error: --load 0.5: all 5 job(s) of the trace cut arrive at the "
                          "same time")
    assert not out.exists()  # refused before anything is simulated or written


def test_load_still_rescales_a_cut_that_arrives_over_time(fixtures_dir: Path,
                                                          table: ThroughputTable) -> None:
    spec = uniform_cluster(GPUS)
    path = fixtures_dir / "sim" / TRACE
    with pytest.raises(ConfigError, match="arrive at the same time"):
        prepare_trace(TraceSetup(path, count=24, load=0.5), table, spec)
    jobs = prepare_trace(TraceSetup(path, count=30, load=0.5), table, spec)
    assert offered_load(jobs, capacity(spec, table)) == pytest.approx(0.5)
    same = prepare_trace(TraceSetup(path, count=30), table, spec)
    assert not np.allclose([j.submit_s for j in jobs], [j.submit_s for j in same])


def test_load_of_a_cut_arriving_within_a_second_is_the_load_asked(
        tmp_path: Path, fixtures_dir: Path, table: ThroughputTable) -> None:
    """Three real Gavel rows submitted 0.25 s apart (a scripted burst; Gavel's generated traces
    have fractional arrival times): offered_load counts such a span as 1 s, and the rescaled
    arrivals used to give twice the load asked."""
    rows = (fixtures_dir / "sim" / TRACE).read_text().splitlines()[:3]
    trace = tmp_path / "burst.trace"
    trace.write_text("".join(f"{row.rsplit(chr(9), 1)[0]}\t{arrival}\n"
                             for row, arrival in zip(rows, ("0", "0.25", "0.5"), strict=True)))
    spec = uniform_cluster(GPUS)
    for load in (1.0, 0.5):
        jobs = prepare_trace(TraceSetup(trace, load=load), table, spec)
        assert offered_load(jobs, capacity(spec, table)) == pytest.approx(load)
