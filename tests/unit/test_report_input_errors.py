"""`hase report`: every --since/--until is read (and clipped to) or refused; --input clips too;
a saved file that is not sacct's JSON, or a bad record in it, is an error naming what is wrong."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from slurm_hase.cli import report_cmd
from slurm_hase.cli.main import cli
from slurm_hase.errors import ConfigError, SlurmParseError
from slurm_hase.reports.window import parse_time, stamp, window
from slurm_hase.slurm.parse_json_sacct import parse_sacct_json
from slurm_hase.slurm.types import AccountingRecord, Job, JobState
from tests.conftest import run_main

NOW = datetime(2026, 12, 3, 8, 50, 38, tzinfo=UTC).timestamp()
NOV1 = int(datetime(2026, 11, 1, tzinfo=UTC).timestamp())
DAY = 86400


@pytest.mark.usefixtures("utc")
@pytest.mark.parametrize(("value", "expected"), [
    ("now", "2026-12-03T08:50:38"),
    ("now-7days", "2026-11-26T08:50:38"),
    ("NOW - 2 weeks", "2026-11-19T08:50:38"),
    ("now+1day", "2026-12-04T08:50:38"),
    ("now-90", "2026-12-03T08:49:08"),  # seconds by default, as in sacct
    ("2026-11-02", "2026-11-02T00:00:00"),
    ("2026-11-02T08:30", "2026-11-02T08:30:00"),
    ("2026-11-02 08:30:15", "2026-11-02T08:30:15"),
    ("11/02/26", "2026-11-02T00:00:00"),
    ("11.02.26", "2026-11-02T00:00:00"),
    ("110226", "2026-11-02T00:00:00"),
    ("1/2/26", "2026-01-02T00:00:00"),
    ("11/02/26-08:00", "2026-11-02T08:00:00"),
    ("11/02", "2026-11-02T00:00:00"),
    ("1102", "2026-11-02T00:00:00"),
    ("12/24", "2026-12-24T00:00:00"),  # this month: this year, like sacct
    ("04/01", "2026-04-01T00:00:00"),
    ("08:00", "2026-12-03T08:00:00"),
    ("4:30pm", "2026-12-03T16:30:00"),
    ("12:00am", "2026-12-03T00:00:00"),
    ("today", "2026-12-03T00:00:00"),
    ("midnight", "2026-12-03T00:00:00"),
    ("tomorrow", "2026-12-04T00:00:00"),
    ("noon", "2026-12-03T12:00:00"),
    ("elevenses", "2026-12-03T11:00:00"),
    ("fika", "2026-12-03T15:00:00"),
    ("teatime", "2026-12-03T16:00:00"),
    ("today noon", "2026-12-03T12:00:00"),
])
def test_sacct_time_forms_are_read(value: str, expected: str) -> None:
    assert stamp(parse_time(value, NOW, "--since")) == expected


@pytest.mark.usefixtures("utc")
def test_year_less_date_of_a_month_to_come_is_last_year() -> None:
    jan = datetime(2027, 1, 15, tzinfo=UTC).timestamp()
    assert stamp(parse_time("12/20", jan)) == "2026-12-20T00:00:00"
    assert stamp(parse_time("01/10", jan)) == "2027-01-10T00:00:00"


@pytest.mark.parametrize(("value", "problem"), [
    ("bogus", "unknown time form"),
    ("yesterday", "unknown time form"),
    ("now-7d", "unknown time form"),  # sacct wants the whole unit name too
    ("20261101", "unknown time form"),
    ("2026-11-01T08:00+02:00", "unknown time form"),
    ("", "unknown time form"),
    ("2026-13-01", "not a valid date or time (month must be in 1..12)"),
    ("02/30/26", "not a valid date or time (day is out of range for month)"),
    ("25:00", "not a valid date or time (hour must be in 0..23)"),
    ("13:00pm", "not a valid date or time (hour 13 with PM)"),
    ("now-99999999999999weeks", "not a valid date or time"),
])
def test_unreadable_time_is_refused_with_the_forms(value: str, problem: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_time(value, NOW, "--until")
    msg = str(exc.value)
    assert msg.startswith(f"bad --until {value!r}: {problem}")
    assert "; accepted: now[{+|-}COUNT[seconds|minutes|hours|days|weeks]]" in msg
    assert "MM/DD[/YY]" in msg and "teatime" in msg


@pytest.mark.usefixtures("utc")
def test_empty_or_inverted_window_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^empty window: --since '2026-11-03' \(2026-11-03T00:00:00\) "
                                          r"is not before --until '11/02/26' \(2026-11-02T00:00:00\)$"):
        window("2026-11-03", "11/02/26", NOW)
    with pytest.raises(ConfigError, match="^empty window"):
        window("today", "midnight", NOW)
    assert window(None, "2026-11-02", NOW) == (0, NOV1 + DAY)  # open start (saved files)


class TwoDayJob:
    """Live-mode seam: one job on 1 A100 from 11-01 to 11-03 (48 GPU-hours); records the window."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def accounting(self, *, since: str, until: str) -> list[AccountingRecord]:
        self.calls.append((since, until))
        return [AccountingRecord("1", "j", "phys", "ann", JobState.COMPLETED, submit_time=NOV1,
                                 start_time=NOV1, end_time=NOV1 + 2 * DAY, elapsed_s=2 * DAY,
                                 alloc_tres={"gres/gpu:a100": "1"}, alloc_gpus={"a100": 1})]

    def account_shares(self) -> dict[str, float]:
        return {"phys": 1.0}

    def nodes(self) -> list[Any]:
        return []

    def jobs(self) -> list[Job]:
        return []


@pytest.mark.usefixtures("utc")
@pytest.mark.parametrize("since", ["2026-11-02", "11/02/26", "11/02/26-00:00", "1102", "11.02.26"])
def test_every_sacct_form_clips_the_same(monkeypatch: pytest.MonkeyPatch, since: str) -> None:
    """The audit's case: `11/02/26` used to reach sacct unclipped (48 GPU-h, window null)."""
    backend = TwoDayJob()
    monkeypatch.setattr(report_cmd, "_backend", lambda timeout_s: backend)
    res = CliRunner().invoke(cli, ["report", "usage", "--since", since, "--until", "2026-11-03",
                                   "--json", "--weights", "none"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["window"] == [NOV1 + DAY, NOV1 + 2 * DAY]
    assert data["total_gpu_hours"] == 24.0
    assert backend.calls == [("2026-11-02T00:00:00", "2026-11-03T00:00:00")]


@pytest.mark.parametrize(("args", "message"), [
    (["--since", "yesterday"], "hase: error: bad --since 'yesterday': unknown time form; accepted: "),
    (["--until", "2026-02-30"], "hase: error: bad --until '2026-02-30': not a valid date or time "),
    (["--since", "2026-11-03", "--until", "2026-11-02"],
     "hase: error: empty window: --since '2026-11-03' ("),
])
def test_bad_window_fails_before_sacct_runs(monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str],
                                            args: list[str], message: str) -> None:
    backend = TwoDayJob()
    monkeypatch.setattr(report_cmd, "_backend", lambda timeout_s: backend)
    for command in ("usage", "fairness"):
        code, out, err = run_main(["report", command, *args], capsys)
        assert (code, out) == (2, "")
        assert err.startswith(message) and err.count("\n") == 1  # one line, no traceback
    assert backend.calls == []


def _saved(fixtures_dir: Path, tmp_path: Path) -> Path:
    """The 24.11 capture with job 1 (1 A100) running 11-01 to 11-03 instead of 1 s."""
    doc = json.loads((fixtures_dir / "slurm" / "24.11" / "sacct.json").read_text())
    job = next(j for j in doc["jobs"] if j["job_id"] == 1)
    job["time"].update(submission=NOV1, eligible=NOV1, start=NOV1, end=NOV1 + 2 * DAY,
                       elapsed=2 * DAY)
    path = tmp_path / "saved.json"
    path.write_text(json.dumps(doc))
    return path


def _usage(*args: str) -> dict[str, Any]:
    res = CliRunner().invoke(cli, ["report", "usage", "--json", "--weights", "none", *args])
    assert res.exit_code == 0, res.output
    data: dict[str, Any] = json.loads(res.stdout)
    return data


@pytest.mark.usefixtures("utc")
def test_input_is_clipped_to_a_given_window(fixtures_dir: Path, tmp_path: Path) -> None:
    saved = str(_saved(fixtures_dir, tmp_path))
    whole = _usage("--input", saved)
    assert whole["window"] is None  # no --since/--until: the whole file, as saved
    assert whole["accounts"][0]["gpu_hours"]["a100"] == pytest.approx(48.0, abs=0.01)
    assert sum(a["jobs"] for a in whole["accounts"]) == 13  # the pending array: 3 tasks, 3 jobs
    part = _usage("--input", saved, "--since", "11/02/26", "--until", "2026-11-03")
    assert part["window"] == [NOV1 + DAY, NOV1 + 2 * DAY]
    assert part["total_gpu_hours"] == 24.0
    # the other jobs were submitted on 11-29, after the window: left out, as sacct would
    assert [(a["account"], a["jobs"]) for a in part["accounts"]] == [("teama", 1)]
    late = _usage("--input", saved, "--since", "2026-11-29")  # --until defaults to now
    assert late["window"][0] == NOV1 + 28 * DAY
    assert sum(a["jobs"] for a in late["accounts"]) == 12 and "a100" in late["gpu_types"]
    early = _usage("--input", saved, "--until", "2026-11-01T12:00")  # open start
    assert early["window"] == [0, NOV1 + DAY // 2] and early["total_gpu_hours"] == 12.0


@pytest.mark.usefixtures("utc")
def test_input_window_selects_jobs_as_the_live_report_does(fixtures_dir: Path,
                                                           tmp_path: Path) -> None:
    """Live, sacct -S/-E (no --state) lists a job eligible before the window's end, and the
    pending ones come from squeue (submitted by the end, held ones too). A job submitted in the
    window with --begin after it, which ran later, is not in the window: by its submit time
    alone it was counted there."""
    doc = json.loads((fixtures_dir / "slurm" / "24.11" / "sacct.json").read_text())
    done = next(j for j in doc["jobs"] if j["state"]["current"] == ["COMPLETED"])
    held = next(j for j in doc["jobs"] if j["state"]["current"] == ["PENDING"])
    done["time"].update(submission=NOV1, eligible=NOV1 + 3 * DAY, start=NOV1 + 3 * DAY,
                        end=NOV1 + 3 * DAY + 3600, elapsed=3600)
    held["time"].update(submission=NOV1, eligible=0)  # held, never released
    doc["jobs"] = [done, held]
    path = tmp_path / "saved.json"
    path.write_text(json.dumps(doc))
    inside = _usage("--input", str(path), "--since", "2026-11-01", "--until", "2026-11-02")
    assert [(a["jobs"], a["pending_now"]) for a in inside["accounts"]] == [(1, 1)]
    assert inside["total_gpu_hours"] == 0
    later = _usage("--input", str(path), "--since", "2026-11-01", "--until", "2026-11-05")
    assert sum(a["jobs"] for a in later["accounts"]) == 2 and later["total_gpu_hours"] > 0


def test_input_with_inverted_window_is_refused(fixtures_dir: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(["report", "usage", "--input", str(_saved(fixtures_dir, tmp_path)),
                               "--since", "now", "--until", "now-1day"], capsys)
    assert (code, out) == (2, "")
    assert err.startswith("hase: error: empty window: --since 'now' (")


@pytest.mark.parametrize(("content", "problem"), [
    (b"\xff\xfe\x00garbage", "not UTF-8 text (byte 0xff at offset 0)"),
    (b'{"jobs": [{"name": "caf\xc3"}]}', "not UTF-8 text (byte 0xc3 at offset 23)"),
    (b"", "empty file"),
    (b"  \n", "empty file"),
    (b"[1, 2]", "top level is list, not an object"),
    (b'{"meta": {}}', "no list of objects under 'jobs'"),
    (b'{"jobs": [', "not valid JSON ("),
    (b'{"jobs": [{"job_id": 7, "job_state": "PENDING"}]}', "record 1 (job 7): field 'state': missing"),
])
def test_input_that_is_not_sacct_json_names_the_file(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str],
                                                     content: bytes, problem: str) -> None:
    path = tmp_path / "saved.json"
    path.write_bytes(content)
    code, out, err = run_main(["report", "usage", "--input", str(path)], capsys)
    assert (code, out) == (2, "")
    assert err.startswith(f"hase: error: --input {path}: {problem}")
    assert err.rstrip().endswith("; expected the output of `sacct --json -a`")
    assert err.count("\n") == 1


def test_input_with_utf8_bom_is_read(fixtures_dir: Path, tmp_path: Path) -> None:
    raw = (fixtures_dir / "slurm" / "24.11" / "sacct.json").read_bytes()
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + raw)
    plain = _usage("--input", str(fixtures_dir / "slurm" / "24.11" / "sacct.json"))
    assert _usage("--input", str(path)) == plain


def _set(*keys: str | int, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(rec: dict[str, Any]) -> None:
        obj: Any = rec
        for key in keys[:-1]:
            obj = obj[key]
        obj[keys[-1]] = value
    return mutate


def _drop(key: str) -> Callable[[dict[str, Any]], None]:
    def mutate(rec: dict[str, Any]) -> None:
        del rec[key]
    return mutate


@pytest.mark.parametrize("version", ["22.05", "24.11"])
@pytest.mark.parametrize(("mutate", "problem"), [
    (_set("state", value=5), "field 'state': expected an object, got 5"),
    (_drop("state"), "field 'state': missing"),
    (_set("state", "current", value=[1]), "field 'state.current': expected a string or a list "
                                          "of strings, got [1]"),
    (_drop("time"), "field 'time': missing"),
    (_set("time", value=None), "field 'time': expected an object, got null"),
    (_set("time", "start", value="x"), "field 'time.start': expected a number, got \"x\""),
    (_set("tres", value=[]), "field 'tres': expected an object, got []"),
    (_set("tres", "allocated", value={"count": 1}), "field 'tres.allocated': expected a list, "
                                                    "got {\"count\": 1}"),
    (_set("tres", "allocated", value=[{"count": 1}]), "field 'tres.allocated[0].type': missing"),
    (_set("tres", "allocated", value=[7]), "field 'tres.allocated[0]': expected an object, got 7"),
    (_set("account", value=["a"]), "field 'account': expected a string, got [\"a\"]"),
    (_set("array", value="x"), "field 'array': expected an object, got \"x\""),
    (_set("comment", value={"job": 3}), "field 'comment.job': expected a string, got 3"),
    (_set("name", value="x" * 100), None),  # long but fine
])
def test_bad_record_names_the_record_and_field(fixtures_dir: Path, version: str,
                                               mutate: Callable[[dict[str, Any]], None],
                                               problem: str | None) -> None:
    doc = json.loads((fixtures_dir / "slurm" / version / "sacct.json").read_text())
    bad = copy.deepcopy(doc)
    mutate(bad["jobs"][1])
    if problem is None:
        assert len(parse_sacct_json(json.dumps(bad))) == len(doc["jobs"])
        return
    with pytest.raises(SlurmParseError) as exc:
        parse_sacct_json(json.dumps(bad))
    job = doc["jobs"][1]["job_id"]
    assert str(exc.value) == f"cannot parse sacct --json: record 2 (job {job}): {problem}"


def test_bad_record_without_job_id_and_long_values(fixtures_dir: Path) -> None:
    doc = json.loads((fixtures_dir / "slurm" / "24.11" / "sacct.json").read_text())
    del doc["jobs"][3]["job_id"]
    doc["jobs"][0]["state"] = ["COMPLETED"] * 20
    with pytest.raises(SlurmParseError, match=r"^cannot parse sacct --json: record 1 \(job 1\): "
                                              r"field 'state': expected an object, got "
                                              r"\[\"COMPLETED\", .{43}\.\.\.$"):
        parse_sacct_json(json.dumps(doc))
    doc["jobs"][0]["state"] = {"current": ["COMPLETED"]}
    with pytest.raises(SlurmParseError, match=r"^cannot parse sacct --json: record 4: "
                                              r"field 'job_id': missing$"):
        parse_sacct_json(json.dumps(doc))
