"""Prometheus metrics as plain text exposition (format 0.0.4), no client library.

Two ways out, both optional: a textfile for node_exporter's textfile collector (written
atomically, write-then-rename) and a tiny /metrics HTTP endpoint (http.server, started only by
the entry point).
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from slurm_hase.daemon.cycle import CycleResult
from slurm_hase.errors import ConfigError
from slurm_hase.files import replace_whole

Labels = tuple[tuple[str, str], ...]

_HELP: dict[str, tuple[str, str]] = {
    "hase_schedd_cycle_duration_seconds": ("gauge", "Wall time of the latest cycle."),
    "hase_schedd_cycle_duration_seconds_sum": ("counter", "Total wall time of all cycles."),
    "hase_schedd_cycles_total": ("counter", "Cycles run, by outcome (ok, quiet: nothing changed so nothing decided, unavailable, error)."),
    "hase_schedd_cycle_stage_seconds": ("gauge", "Wall time of each step of the latest cycle (observe, state, decide, plan, act; a quiet cycle only observes)."),
    "hase_schedd_cycle_stage_seconds_sum": ("counter", "Total wall time of each step over all cycles: where the daemon's time goes."),
    "hase_schedd_last_cycle_timestamp_seconds": ("gauge", "When the latest cycle started."),
    "hase_schedd_pending_jobs": ("gauge", "Pending GPU jobs by requested/constrained type."),
    "hase_schedd_managed_pending_jobs": ("gauge", "Pending jobs the policy saw."),
    "hase_schedd_running_jobs": ("gauge", "Running GPU jobs."),
    "hase_schedd_actions_total": ("counter", "scontrol updates, by kind and outcome."),
    "hase_schedd_errors_total": ("counter", "Errors, by kind (slurm, policy: its decide raised, update, store, shares, config: a reload, metrics: the textfile)."),
    "hase_schedd_backoff_seconds": ("gauge", "Current back-off delay (0 when healthy)."),
}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    """A sample value at full precision, as Prometheus' text format takes it: whole numbers
    without a point ("3"), others as Python's shortest exact repr ("1796313600.25"); `:g`
    kept 6 digits, putting the cycle timestamp up to ~5,000 s off."""
    value = float(value)
    if value.is_integer() and abs(value) < 2**63:
        return str(int(value))
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


class Metrics:
    """Thread-safe gauge/counter registry rendered as text exposition."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, dict[Labels, float]] = {}

    def set(self, name: str, value: float, **labels: str) -> None:
        with self._lock:
            self._values.setdefault(name, {})[tuple(sorted(labels.items()))] = float(value)

    def inc(self, name: str, value: float = 1.0, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        with self._lock:
            series = self._values.setdefault(name, {})
            series[key] = series.get(key, 0.0) + float(value)

    def replace(self, name: str, values: Mapping[Labels, float]) -> None:
        """Set a whole labelled gauge at once (drops series that vanished)."""
        with self._lock:
            self._values[name] = dict(values)

    def get(self, name: str, **labels: str) -> float:
        with self._lock:
            return self._values.get(name, {}).get(tuple(sorted(labels.items())), 0.0)

    def render(self) -> str:
        lines: list[str] = []
        with self._lock:
            for name in sorted(self._values):
                kind, text = _HELP.get(name, ("untyped", name))
                lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
                for labels, value in sorted(self._values[name].items()):
                    lab = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
                    text = _number(value)
                    lines.append(f"{name}{{{lab}}} {text}" if lab else f"{name} {text}")
        return "\n".join(lines) + "\n"

    def observe_cycle(self, result: CycleResult, wall_s: float) -> None:
        """Update every per-cycle metric from a CycleResult."""
        self.set("hase_schedd_cycle_duration_seconds", wall_s)
        self.inc("hase_schedd_cycle_duration_seconds_sum", wall_s)
        self.set("hase_schedd_last_cycle_timestamp_seconds", result.started)
        self.replace("hase_schedd_cycle_stage_seconds",
                     {(("stage", stage),): seconds for stage, seconds in result.stages.items()})
        for stage, seconds in result.stages.items():
            self.inc("hase_schedd_cycle_stage_seconds_sum", seconds, stage=stage)
        if result.quiet:  # nothing observed changed: the counts below still stand
            self.inc("hase_schedd_cycles_total", outcome="quiet")
            return
        self.inc("hase_schedd_cycles_total", outcome="unavailable" if result.unavailable else "ok")
        self.replace("hase_schedd_pending_jobs",
                     {(("gpu_type", t or "any"),): float(n) for t, n in result.pending_by_type.items()})
        self.set("hase_schedd_managed_pending_jobs", result.pending)
        self.set("hase_schedd_running_jobs", result.running)
        for _, upd in result.applied:
            for kind, val in (("nice", upd.nice), ("features", upd.features)):
                if val is not None:
                    self.inc("hase_schedd_actions_total", kind=kind, outcome="applied")
        if result.requeued:
            self.inc("hase_schedd_actions_total", len(result.requeued) * 1.0, kind="requeue",
                     outcome="applied")
        self.inc("hase_schedd_actions_total", len(result.skipped) * 1.0, kind="any", outcome="skipped")
        if result.errors:
            self.inc("hase_schedd_errors_total", len(result.errors) * 1.0, kind="update")

    def write_textfile(self, path: str | Path, *, make_parents: bool = True) -> None:
        """Atomically replace `path` (node_exporter reads *.prom files whole); with
        make_parents=False a missing folder is an OSError instead of being created."""
        target = Path(path)
        if make_parents:
            target.parent.mkdir(parents=True, exist_ok=True)
        replace_whole(target, self.render(), mode=0o644)


def _is_ipv6(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).version == 6
    except ValueError:
        return False


def _bind_error(exc: OSError, address: str, port: int) -> ConfigError:
    """Why address:port cannot be served, naming the config field to change."""
    where = f"[{address}]:{port}" if _is_ipv6(address) else f"{address or '*'}:{port}"
    if isinstance(exc, socket.gaierror):
        return ConfigError(f"[schedd.metrics] address: cannot resolve {address!r} "
                           f"({exc.strerror or exc})")
    if exc.errno == errno.EADDRINUSE:
        return ConfigError(f"[schedd.metrics] port: {where} is already in use by another "
                           "process; choose a free port (0 turns the endpoint off)")
    if exc.errno == errno.EACCES:
        return ConfigError(f"[schedd.metrics] port: not allowed to listen on {where} "
                           "(ports below 1024 need root)")
    if exc.errno == errno.EADDRNOTAVAIL:
        return ConfigError(f"[schedd.metrics] address: {address!r} is not an address of this "
                           "host")
    return ConfigError(f"[schedd.metrics] address/port: cannot listen on {where} "
                       f"({exc.strerror or exc})")


def serve_metrics(metrics: Metrics, address: str, port: int) -> ThreadingHTTPServer:
    """Serve GET /metrics on address:port from a daemon thread; returns the server.
    ConfigError naming `[schedd.metrics] port` or `address` when it cannot listen there."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server API
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            body = metrics.render().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            return

    class Server(ThreadingHTTPServer):
        address_family = socket.AF_INET6 if _is_ipv6(address) else socket.AF_INET

    try:
        server = Server((address, port), Handler)
    except OSError as exc:
        raise _bind_error(exc, address, port) from None
    threading.Thread(target=server.serve_forever, name="hase-metrics", daemon=True).start()
    return server
