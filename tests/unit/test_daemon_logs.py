"""Daemon logs: text lines keep the structured fields (key=value), JSON lines are unchanged."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from slurm_hase.daemon.logs import JsonFormatter, TextFormatter, format_fields, setup_logging


def _record(msg: str = "cycle done", **fields: object) -> logging.LogRecord:
    rec = logging.LogRecord("slurm_hase.daemon", logging.INFO, "f", 1, msg, None, None)
    rec.created = 0.0
    for k, v in fields.items():
        setattr(rec, k, v)
    return rec


def test_text_lines_end_in_the_fields_in_the_order_given() -> None:
    rec = _record(pending=7, decisions=3, errors=0, dry_run=True, duration_s=0.25)
    line = TextFormatter().format(rec)
    assert line.endswith(" INFO slurm_hase.daemon: cycle done "
                         "pending=7 decisions=3 errors=0 dry_run=true duration_s=0.25")


def test_text_values_are_quoted_when_they_hold_spaces() -> None:
    fields = {"reason": "SlurmUnavailableError: no controller", "empty": "", "usage": {"teama": 12},
              "none": None, "odd": '"x', "plain": "a=b"}
    assert format_fields(fields) == ('reason="SlurmUnavailableError: no controller" empty="" '
                                     'usage={"teama":12} none=null odd="\\"x" plain=a=b')
    assert format_fields({}) == ""


def test_text_line_without_fields_is_the_message_alone() -> None:
    assert TextFormatter().format(_record("quiet")).endswith("slurm_hase.daemon: quiet")


def test_text_traceback_comes_after_the_fields() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        rec = logging.LogRecord("slurm_hase.daemon", logging.ERROR, "f", 1, "failed", None,
                                sys.exc_info())
    rec.job = "42"
    first, *rest = TextFormatter().format(rec).splitlines()
    assert first.endswith("failed job=42")
    assert rest[0].startswith("Traceback") and rest[-1] == "ValueError: boom"


def test_json_lines_are_unchanged() -> None:
    rec = _record(pending=7, usage={"teama": 12})
    assert json.loads(JsonFormatter().format(rec)) == {
        "ts": 0.0, "level": "info", "logger": "slurm_hase.daemon", "msg": "cycle done",
        "pending": 7, "usage": {"teama": 12}}


@pytest.mark.parametrize("fmt, formatter", [("text", TextFormatter), ("json", JsonFormatter)])
def test_setup_logging_picks_the_formatter(fmt: str, formatter: type) -> None:
    root = logging.getLogger("slurm_hase")
    saved = (root.handlers[:], root.level, root.propagate)
    try:
        setup_logging(fmt, "INFO")
        assert [type(h.formatter) for h in root.handlers] == [formatter]
    finally:
        root.handlers[:], root.level, root.propagate = saved[0], saved[1], saved[2]
