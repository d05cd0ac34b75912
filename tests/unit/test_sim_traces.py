"""Trace loaders: real Gavel excerpt, hand-made bad rows, and (with ../shared) the real traces."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from slurm_hase.errors import DataError
from slurm_hase.sim.throughput import ThroughputTable, load_throughputs
from slurm_hase.sim.traces import (
    load_alibaba,
    load_gavel,
    load_philly,
    offered_load,
    scale_to_load,
    tile,
    window,
)


@pytest.fixture(scope="module")
def table(fixtures_dir: Path) -> ThroughputTable:
    return load_throughputs(fixtures_dir / "sim" / "gavel_throughputs_excerpt.json")


def test_gavel_excerpt_durations_follow_v100_throughput(table: ThroughputTable, fixtures_dir: Path) -> None:
    jobs = load_gavel(fixtures_dir / "sim" / "gavel_max_min_fairness_excerpt.trace", table,
                      np.random.default_rng(0))
    assert len(jobs) == 40
    first = jobs[0]
    assert first.workload == "ResNet-18 (batch size 128)" and first.num_gpus == 4
    tput = table.isolated["v100"][("ResNet-18 (batch size 128)", 4)]
    assert first.duration_s == pytest.approx(925982 / tput)
    rt = table.runtimes(first.workload, 4, first.duration_s, ("k80", "v100"))
    assert rt["v100"] == pytest.approx(first.duration_s) and rt["k80"] > rt["v100"]


def test_colocation_factor_from_measured_pairs(table: ThroughputTable) -> None:
    f = table.pair_factor("v100", "ResNet-50 (batch size 64)", "Transformer (batch size 128)")
    assert 0.0 < f < 1.0
    assert table.mean_slowdown("v100", "ResNet-50 (batch size 64)") > 1.0


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "philly.csv"
    p.write_text(text)
    return p


def test_philly_missing_column_refused(tmp_path: Path, table: ThroughputTable) -> None:
    p = _write(tmp_path, "timestamp,duration,num_gpus\n2017-10-01 00:00:00,60,1\n")
    with pytest.raises(DataError, match="missing column.*cluster"):
        load_philly(p, table, np.random.default_rng(0))


def test_philly_negative_duration_names_row(tmp_path: Path, table: ThroughputTable) -> None:
    p = _write(tmp_path, "timestamp,duration,num_gpus,gpu_time,cluster\n"
                         "2017-10-01 00:00:00,60,1,60,aa\n2017-10-01 00:01:00,-5,1,-5,bb\n")
    with pytest.raises(DataError, match="line 3: column 'duration'"):
        load_philly(p, table, np.random.default_rng(0))


def test_philly_accounts_and_seeded_workloads(tmp_path: Path, table: ThroughputTable) -> None:
    p = _write(tmp_path, "timestamp,duration,num_gpus,gpu_time,cluster\n"
               + "".join(f"2017-10-01 00:0{i}:00,{60 * (i + 1)},{1 + i % 2},0,vc{i % 3}\n" for i in range(8)))
    a = load_philly(p, table, np.random.default_rng(5))
    b = load_philly(p, table, np.random.default_rng(5))
    assert a == b
    assert {j.account for j in a} == {"vc-vc0", "vc-vc1", "vc-vc2"}
    assert a[0].submit_s == 0.0 and a[-1].submit_s == 420.0
    assert all(j.workload in table.job_types(1) + table.job_types(2) for j in a)


def test_alibaba_fraction_constraint_and_negative(tmp_path: Path, table: ThroughputTable) -> None:
    head = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
    p = tmp_path / "pods.csv"
    p.write_text(head + "p0,1,1,1,500,V100M16|T4,LS,Running,0,100,10\n"
                        "p1,1,1,0,0,,BE,Running,5,100,5\n")
    jobs = load_alibaba(p, table, np.random.default_rng(0))
    assert len(jobs) == 1
    assert jobs[0].gpu_fraction == 0.5 and jobs[0].constraint == ("v100", "t4")
    assert jobs[0].duration_s == 90 and jobs[0].account == "LS"
    p.write_text(head + "p0,1,1,1,1000,,LS,Running,0,5,10\n")
    with pytest.raises(DataError, match="line 2: negative duration"):
        load_alibaba(p, table, np.random.default_rng(0))


def test_window_tile_and_load(table: ThroughputTable, fixtures_dir: Path) -> None:
    jobs = load_gavel(fixtures_dir / "sim" / "gavel_max_min_fairness_excerpt.trace", table,
                      np.random.default_rng(0))
    jobs = [replace(j, submit_s=float(i * 100)) for i, j in enumerate(jobs)]
    part = window(jobs, 5, 10)
    assert len(part) == 10 and part[0].submit_s == 0.0
    big = tile(part, 25)
    assert len(big) == 25 and big[10].submit_s > big[9].submit_s
    scaled = scale_to_load(big, 16, 0.8)
    assert offered_load(scaled, 16) == pytest.approx(0.8)


@pytest.mark.shared
def test_real_traces_load(shared_data: Path) -> None:
    table = load_throughputs(shared_data / "gavel" / "simulation_throughputs.json")
    philly = load_philly(shared_data / "sia" / "philly_jobs_sia.csv", table, np.random.default_rng(0))
    assert len(philly) == 82247 and len({j.account for j in philly}) >= 10
    ali = load_alibaba(shared_data / "alibaba" / "cluster-trace-gpu-v2023__openb_pod_list_gpuspec33.csv",
                       table, np.random.default_rng(0))
    assert any(j.gpu_fraction < 1 for j in ali) and any(j.constraint for j in ali)
