"""Logs on stderr: one JSON object per line (journald keeps them as they are), or plain text
lines that end in the record's structured fields as ``key=value`` pairs."""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

_STD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The fields a log call passed with ``extra=``, in the order it gave them."""
    return {k: v for k, v in record.__dict__.items() if k not in _STD and not k.startswith("_")}


def _text_value(value: Any) -> str:
    """A value for ``key=value``: strings as they are, the rest as compact JSON (true, null,
    {"a":1}); quoted with JSON string escapes when empty, holding whitespace, or a string
    that starts with a quote (so a quoted value always reads back as one)."""
    text = value if isinstance(value, str) else json.dumps(
        value, default=str, separators=(",", ":"))
    if not text or any(c.isspace() for c in text) or (isinstance(value, str) and text[0] == '"'):
        return json.dumps(text)
    return text


def format_fields(fields: dict[str, Any]) -> str:
    """``key=value`` pairs separated by spaces, in the order of `fields`."""
    return " ".join(f"{k}={_text_value(v)}" for k, v in fields.items())


class JsonFormatter(logging.Formatter):
    """{"ts", "level", "logger", "msg", ...extra fields} per record."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update(extra_fields(record))
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, sort_keys=False)


class TextFormatter(logging.Formatter):
    """``time LEVEL logger: message key=value ...`` (a traceback, if any, on the lines after)."""

    def __init__(self, fmt: str = TEXT_FORMAT) -> None:
        super().__init__(fmt)

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's name)
        line = super().formatMessage(record)
        fields = format_fields(extra_fields(record))
        return f"{line} {fields}" if fields else line


def setup_logging(fmt: str = "json", level: str = "INFO") -> None:
    """Configure the slurm_hase logger tree once (called only by the entry point)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger("slurm_hase")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


def set_level(level: str) -> None:
    """Change the slurm_hase logger tree's level (a config reload)."""
    logging.getLogger("slurm_hase").setLevel(level)
