"""`hase schedd status` as text: the lines it prints from the status data (schedd_cmd.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any


def model_info(model: dict[str, Any] | None) -> dict[str, Any] | None:
    """The stored model row with its `info` JSON text decoded (left as text if it is not JSON)."""
    if model is None or not isinstance(model.get("info"), str):
        return model
    try:
        info = json.loads(model["info"])
    except ValueError:
        return model
    return {**model, "info": info} if isinstance(info, dict | list) else model


def model_line(model: Mapping[str, Any] | None) -> str:
    """The predictor model the daemon last loaded, in one line."""
    if model is None:
        return "model: none recorded yet (the daemon records the model it loads at start)"
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(model["loaded_at"])))
    return f"model: {model['path']} (sha256 {str(model['digest'])[:12]}, loaded {when})"


def status_lines(data: Mapping[str, Any]) -> list[str]:
    """The status text of `data` (status --json's object), its cycles last."""
    policy, ran = data["policy"], data["last_cycle_policy"]
    lines = [f"state store: {data['state_db']}   policy (config): {policy}"]
    if ran is not None and ran != policy:
        lines.append(f"note: the last recorded cycle ran policy {ran}, not the config's {policy}: "
                     "a daemon started before the config changed keeps its policy until it is "
                     "reloaded (systemctl reload hase-schedd)")
    pid = data["daemon_pid"]
    lines.append("daemon: not running on this store" if pid is None
                 else f"daemon: running (pid {pid})" if pid else "daemon: running")
    seen = data["last_observed"]
    if seen is not None:
        ago = max(time.time() - seen, 0.0)
        lines.append(f"last observed Slurm: {ago:.0f} s ago (cycles that found nothing changed "
                     "decide nothing and are not listed below; see refresh_s)")
    lines.append(f"jobs carrying our Nice/Features: {data['owned_jobs']}")
    lines.append(model_line(data["model"]))
    for c in data["cycles"]:
        lines.append(f"  cycle {c['id']:>6}  {c['policy']:<6} pending={c['pending']:<5} "
                     f"applied={c['applied']:<4} requeued={c['requeued']:<3} "
                     f"errors={c['errors']:<3} {c['duration_s'] * 1000:.0f} ms"
                     f"{'  DRY' if c['dry_run'] else ''}{'  SLURM-DOWN' if c['unavailable'] else ''}")
    return lines
