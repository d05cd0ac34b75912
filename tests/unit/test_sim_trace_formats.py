"""A site's own trace: time formats (UTC, offsets, seconds), an Excel BOM, the header's columns,
file line numbers, where each job came from, and Alibaba's skipped pods counted."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from slurm_hase.errors import DataError
from slurm_hase.sim.throughput import ThroughputTable, load_throughputs
from slurm_hase.sim.traces import detect_kind, load_alibaba, load_gavel, load_philly, load_trace

HEAD = "timestamp,duration,num_gpus,gpu_time,cluster\n"
ALIBABA_HEAD = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
                "creation_time,deletion_time,scheduled_time\n")
US_EASTERN = "EST5EDT,M3.2.0,M11.1.0"  # a POSIX rule (no zoneinfo files needed): DST ends 5 Nov 2017


@pytest.fixture(scope="module")
def table(fixtures_dir: Path) -> ThroughputTable:
    return load_throughputs(fixtures_dir / "sim" / "gavel_throughputs_excerpt.json")


@pytest.fixture()
def host_tz() -> Iterator[None]:
    """Restore the process's TZ after a test that changes it."""
    before = os.environ.get("TZ")
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = before
        time.tzset()


def _philly(tmp_path: Path, *rows: str, head: str = HEAD) -> Path:
    p = tmp_path / "site.csv"
    p.write_text(head + "".join(f"{r}\n" for r in rows), encoding="utf-8")
    return p


def _arrivals(path: Path, table: ThroughputTable) -> list[float]:
    return [j.submit_s for j in load_philly(path, table, np.random.default_rng(0))]


def test_philly_times_are_utc_whatever_the_host_time_zone(tmp_path: Path, table: ThroughputTable,
                                                         host_tz: None) -> None:
    # two days apart across the end of US daylight saving time (5 Nov 2017)
    p = _philly(tmp_path, "2017-11-04 12:00:00,60,1,60,a", "2017-11-06 12:00:00,60,1,60,a")
    seen = []
    for tz in ("UTC0", US_EASTERN):
        os.environ["TZ"] = tz
        time.tzset()
        seen.append(_arrivals(p, table))
    assert seen[0] == seen[1] == [0.0, 2 * 86400.0]


def test_offsets_and_epoch_seconds_are_read(tmp_path: Path, table: ThroughputTable) -> None:
    p = _philly(tmp_path, "2017-10-01 00:00:00,60,1,60,a", "2017-10-01T09:00:00+08:00,60,1,60,a",
                "1506819600,60,1,60,a", "1506823200.5,60,1,60,a")
    assert _arrivals(p, table) == [0.0, 3600.0, 3600.0, 7200.5]


@pytest.mark.parametrize("bad", ["yesterday", "2017-13-01 00:00:00", "-5", "1e9", ""])
def test_a_bad_time_says_the_format_expected(tmp_path: Path, table: ThroughputTable,
                                             bad: str) -> None:
    p = _philly(tmp_path, "2017-10-01 00:00:00,60,1,60,a", f"{bad},60,1,60,a")
    with pytest.raises(DataError, match=rf"site.csv: line 3: column 'timestamp': bad time "
                                        rf"'{bad}': expected an ISO 8601 date and time such as "
                                        r"2017-10-01 00:00:00 \(UTC unless .*\(epoch seconds\)$"):
        load_philly(p, table, np.random.default_rng(0))


def test_a_csv_saved_by_excel_with_a_bom_loads(tmp_path: Path, table: ThroughputTable) -> None:
    p = tmp_path / "excel.csv"
    p.write_text(HEAD + "2017-10-01 00:00:00,60,2,120,a\n", encoding="utf-8-sig")
    assert p.read_bytes()[:3] == b"\xef\xbb\xbf"
    assert load_philly(p, table, np.random.default_rng(0))[0].num_gpus == 2


def test_missing_columns_list_those_found_and_point_at_trace_kind(
        tmp_path: Path, table: ThroughputTable) -> None:
    p = _philly(tmp_path, "2017-10-01 00:00:00,60,1", head="ts,duration,gpus\n")
    with pytest.raises(DataError) as exc:
        load_philly(p, table, np.random.default_rng(0))
    assert str(exc.value) == (
        f"{p}: line 1: header: missing column(s) timestamp, num_gpus, cluster; found 'ts', "
        "'duration', 'gpus'; a philly trace needs timestamp, duration, num_gpus, cluster "
        "(docs/simulator.md; --trace-kind philly|gavel|alibaba picks the format)")
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(DataError, match="found no header; a philly trace needs"):
        load_philly(empty, table, np.random.default_rng(0))


def test_errors_name_the_file_line_past_blank_lines(tmp_path: Path, table: ThroughputTable) -> None:
    p = _philly(tmp_path, "2017-10-01 00:00:00,60,1,60,a", "", "", "2017-10-01 00:00:00,x,1,60,a")
    with pytest.raises(DataError, match="site.csv: line 5: column 'duration': not a number"):
        load_philly(p, table, np.random.default_rng(0))
    trace = tmp_path / "t.trace"
    row = "ResNet-18 (batch size 128)\tx\tx\tx\t1\t925982\t1\t1\t-1.000000\t0\n"
    trace.write_text(row + "\n" + row.replace("\t1\t1\t-1", "\t1.5\t1\t-1"))
    with pytest.raises(DataError, match="t.trace: line 3: column 'scale_factor'"):
        load_gavel(trace, table, np.random.default_rng(0))


def test_each_job_keeps_its_place_in_the_trace(tmp_path: Path, table: ThroughputTable) -> None:
    p = _philly(tmp_path, "2017-10-01 00:05:00,60,1,60,a", "2017-10-01 00:00:00,60,1,60,b")
    jobs = load_philly(p, table, np.random.default_rng(0))
    assert [(j.account, j.source) for j in jobs] == [("vc-b", "line 3"), ("vc-a", "line 2")]
    pods = tmp_path / "pods.csv"
    pods.write_text(ALIBABA_HEAD + "openb-pod-0007,1,1,1,1000,,LS,Running,5,100,10\n"
                                   "openb-pod-0003,1,1,1,1000,,BE,Running,0,100,10\n")
    assert [j.source for j in load_alibaba(pods, table, np.random.default_rng(0))] == [
        "openb-pod-0003", "openb-pod-0007"]


def test_alibaba_pods_skipped_are_counted(tmp_path: Path, table: ThroughputTable) -> None:
    pods = tmp_path / "pods.csv"
    cpu = "c{},1,1,0,0,,BE,Running,0,100,10\n"
    never = "n0,1,1,1,1000,,LS,Pending,5,0,0\n"
    pods.write_text(ALIBABA_HEAD + cpu.format(1) + cpu.format(2) + never
                    + "g0,1,1,1,1000,,LS,Running,0,100,10\n")
    said: list[str] = []
    assert len(load_trace(pods, table, np.random.default_rng(0), "alibaba", said.append)) == 1
    assert said == ["pods.csv: 2 CPU-only pods and 1 never-scheduled pod were skipped (1 GPU "
                    "pods kept)"]
    pods.write_text(ALIBABA_HEAD + cpu.format(1) + cpu.format(2) + never)
    with pytest.raises(DataError, match=r"pods.csv: the trace has no jobs: 2 CPU-only pods and 1 "
                                        r"never-scheduled pod were skipped$"):
        load_alibaba(pods, table, np.random.default_rng(0))


@pytest.mark.parametrize(("name", "kind"), [
    ("x.trace", "gavel"), ("openb_pod_list_default.csv", "alibaba"), ("my_alibaba.csv", "alibaba"),
    ("site.csv", "philly"), ("philly_jobs_sia.csv", "philly"), ("X.TRACE", "gavel"),
])
def test_auto_detection_of_the_trace_kind(name: str, kind: str) -> None:
    assert detect_kind(Path("/data") / name) == kind
