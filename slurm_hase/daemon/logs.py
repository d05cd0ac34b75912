"""Structured logs: one JSON object per line (journald keeps them as they are)."""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

_STD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """{"ts", "level", "logger", "msg", ...extra fields} per record."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STD and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, sort_keys=False)


def setup_logging(fmt: str = "json", level: str = "INFO") -> None:
    """Configure the slurm_hase logger tree once (called only by the entry point)."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("slurm_hase")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
