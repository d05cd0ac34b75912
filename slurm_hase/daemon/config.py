"""The daemon's TOML config (templates/schedd.toml.example), checked completely at start.

An unknown key, policy, knob or GPU type is a ConfigError naming the field, so a typo never
reaches a running scheduler.
"""

from __future__ import annotations

import ipaddress
import math
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurm_hase.errors import ConfigError, HaseError, not_utf8
from slurm_hase.policy.common import NICE_MAX, SLURM_NICE_LIMIT

DEFAULT_DB = "/var/lib/slurm-hase/schedd.db"

_SCHEDD_KEYS = {"interval_s", "refresh_s", "partitions", "dry_run", "state_db", "model", "half_life_s",
                "nice_min_delta", "nice_quantum", "nice_scale", "nice_zero", "backoff_s", "backoff_max_s", "gpu_types", "update_workers", "batch_updates",
                "requeue", "requeue_max", "requeue_min_run_s", "requeue_overhead_s", "begin_horizon_s", "log_format", "log_level", "metrics",
                "history_days"}
_METRICS_KEYS = ("textfile", "port", "address")
_POLICY_KEYS = ("name", "knobs")
# a host name label (RFC 1123): letters, digits and '-', not at either end
_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


@dataclass(frozen=True)
class DaemonConfig:
    """Everything `hase schedd run` needs; built only by load_config / from_mapping."""

    policy: str = "fair"
    knobs: Mapping[str, float] = field(default_factory=dict)
    interval_s: float = 60.0
    # a cycle that finds nothing changed decides nothing until this long after the last one
    # that did (cycle.CycleConfig.refresh_s; 0 = every cycle decides)
    refresh_s: float = 600.0  # = cycle.CycleConfig.refresh_s (a test checks)
    partitions: tuple[str, ...] | None = None
    dry_run: bool = False
    state_db: str = DEFAULT_DB
    model: str | None = None
    half_life_s: float = 7 * 24 * 3600.0
    nice_min_delta: int = 10
    nice_quantum: int = 1
    nice_scale: int = 1
    # policy Nice that maps to Slurm Nice 0 (cycle.CycleConfig.nice_zero): NICE_MAX = policies
    # only ever lower Nice, so Slurm's floor of priority at 1 never flattens their order
    nice_zero: int = NICE_MAX
    backoff_s: float = 5.0
    backoff_max_s: float = 300.0
    gpu_types: tuple[str, ...] | None = None
    update_workers: int = 4
    batch_updates: bool = True
    requeue: bool = False  # let the policy requeue opted-in (checkpoint=yes) running jobs
    requeue_max: int = 8
    requeue_min_run_s: float = 600.0
    # the work a checkpointing job loses to a requeue (steps since its last checkpoint, saving
    # and loading it): its estimate after one counts each run's time less this (progress.py)
    requeue_overhead_s: float = 120.0
    # a pending job whose begin time is further ahead gets no free GPU or requeue yet
    # (cycle.CycleConfig)
    begin_horizon_s: float = 300.0  # = cycle.CycleConfig.begin_horizon_s (a test checks)
    log_format: str = "json"
    log_level: str = "INFO"
    metrics_textfile: str | None = None
    metrics_port: int = 0
    metrics_address: str = "127.0.0.1"
    shares: Mapping[str, float] = field(default_factory=dict)  # empty = ask sacctmgr
    # cycles and decisions older than this are dropped from the state store (0 = keep all)
    history_days: float = 30.0


def _num(section: str, key: str, value: Any, lo: float, hi: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"[{section}] {key}: must be a number, got {value!r}")
    if not math.isfinite(float(value)):  # TOML's inf and nan: "out of range [1, inf]" misled
        raise ConfigError(f"[{section}] {key}: must be a finite number, got {value!r}")
    if not lo <= float(value) <= hi:
        raise ConfigError(f"[{section}] {key}: {value!r} is out of range [{lo:g}, {hi:g}]")
    return float(value)


def _names(section: str, key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(
            isinstance(v, str) and v and v.replace("-", "").replace("_", "").isalnum()
            for v in value):
        raise ConfigError(f"[{section}] {key}: must be a non-empty list of plain names")
    return tuple(value)


def _default_gpu_check(name: str) -> str:
    from slurm_hase.predict.catalog import resolve_gpu

    return resolve_gpu(name).key


def _default_policy_check(name: str, knobs: Mapping[str, float]) -> None:
    from slurm_hase.policy.registry import make_policy

    make_policy(name, **knobs)


def from_mapping(
    data: Mapping[str, Any],
    *,
    check_gpu: Callable[[str], str] = _default_gpu_check,
    check_policy: Callable[[str, Mapping[str, float]], None] = _default_policy_check,
) -> DaemonConfig:
    """Validate a parsed TOML document; ConfigError names the first bad field."""
    unknown = set(data) - {"schedd", "policy", "shares"}
    if unknown:
        raise ConfigError(f"unknown section(s): {', '.join(sorted(unknown))}")
    for section in ("schedd", "policy", "shares"):
        if not isinstance(data.get(section, {}), Mapping):
            raise ConfigError(f"[{section}] must be a table")
    s = dict(data.get("schedd", {}))
    bad = set(s) - _SCHEDD_KEYS
    if bad:
        raise ConfigError(f"[schedd] unknown key(s): {', '.join(sorted(bad))}")
    out: dict[str, Any] = {}
    for key, lo, hi in (("interval_s", 1.0, 86400.0), ("refresh_s", 0.0, 86400.0),
                        ("half_life_s", 1.0, math.inf),
                        ("backoff_s", 0.1, 3600.0), ("backoff_max_s", 0.1, 86400.0),
                        ("requeue_min_run_s", 0.0, 30 * 86400.0), ("history_days", 0.0, 3650.0),
                        ("begin_horizon_s", 0.0, 30 * 86400.0),
                        ("requeue_overhead_s", 0.0, 86400.0)):
        if key in s:
            out[key] = _num("schedd", key, s[key], lo, hi)
    for key, lo, hi in (("nice_min_delta", 1, 10_000), ("nice_quantum", 1, 1000),
                        ("nice_scale", 1, 100_000), ("nice_zero", 0, NICE_MAX),
                        ("update_workers", 1, 64), ("requeue_max", 0, 10_000)):
        if key in s:
            out[key] = int(_num("schedd", key, s[key], lo, hi))
    _check_nice_range(out.get("nice_zero", NICE_MAX), out.get("nice_scale", 1))
    backoff = out.get("backoff_s", DaemonConfig.backoff_s)
    backoff_max = out.get("backoff_max_s", DaemonConfig.backoff_max_s)
    if backoff_max < backoff:
        raise ConfigError(f"[schedd] backoff_max_s ({backoff_max:g}"
                          f"{'' if 'backoff_max_s' in out else ', the default'}) is below "
                          f"backoff_s ({backoff:g}): the first wait after a failure is backoff_s, "
                          "later waits double up to backoff_max_s")
    for key in ("dry_run", "batch_updates", "requeue"):
        if key in s:
            if not isinstance(s[key], bool):
                raise ConfigError(f"[schedd] {key}: must be true or false")
            out[key] = s[key]
    for key in ("state_db", "model"):
        if key in s:
            if not isinstance(s[key], str):
                raise ConfigError(f"[schedd] {key}: must be a path string")
            out[key] = s[key] or (None if key == "model" else DEFAULT_DB)
    if "partitions" in s:
        out["partitions"] = _names("schedd", "partitions", s["partitions"])
    if "gpu_types" in s:
        types = _names("schedd", "gpu_types", s["gpu_types"])
        for t in types:
            try:
                check_gpu(t)
            except HaseError as exc:
                raise ConfigError(f"[schedd] gpu_types: {exc}") from exc
        out["gpu_types"] = tuple(t.lower() for t in types)
    if s.get("log_format", "json") not in ("json", "text"):
        raise ConfigError("[schedd] log_format: must be 'json' or 'text'")
    out["log_format"] = s.get("log_format", "json")
    level = str(s.get("log_level", "INFO")).upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ConfigError(f"[schedd] log_level: {level!r} is not DEBUG/INFO/WARNING/ERROR")
    out["log_level"] = level
    out.update(_metrics(s.get("metrics", {})))
    out.update(_policy(data.get("policy", {}), check_policy))
    out["shares"] = {str(k): _num("shares", str(k), v, 0.0) for k, v in
                     dict(data.get("shares", {})).items()}
    return DaemonConfig(**out)


def _check_nice_range(zero: int, scale: int) -> None:
    """Every policy level, (level - nice_zero) x nice_scale, must be a Nice Slurm accepts."""
    widest = max(zero, NICE_MAX - zero) * scale
    if widest > SLURM_NICE_LIMIT:
        raise ConfigError(
            f"[schedd] nice_scale {scale} x nice_zero {zero}: policy levels would reach Nice "
            f"{'-' if zero >= NICE_MAX - zero else ''}{widest}, beyond Slurm's limit of "
            f"+-{SLURM_NICE_LIMIT}; nice_scale needs to be at most "
            f"{SLURM_NICE_LIMIT // max(zero, NICE_MAX - zero, 1)} (about the sum of your "
            f"PriorityWeight* / 10 is enough)")


def _unknown_keys(section: str, value: Any, keys: tuple[str, ...]) -> Mapping[str, Any]:
    """`value` as a table of known keys; ConfigError naming the first unknown one."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"[{section}] must be a table (keys: {', '.join(keys)})")
    bad = sorted(set(value) - set(keys))
    if bad:
        raise ConfigError(f"unknown key {bad[0]!r} in [{section}] (keys: {', '.join(keys)})")
    return value


def check_address(address: str) -> str:
    """A listen address: an IPv4/IPv6 literal, a host name, or "" (every interface);
    ConfigError naming `[schedd.metrics] address` otherwise."""
    if address == "":
        return address
    try:
        ipaddress.ip_address(address)
        return address
    except ValueError:
        pass
    name = address[:-1] if address.endswith(".") else address
    if len(name) <= 253 and all(_HOST_LABEL.fullmatch(label) for label in name.split(".")):
        return address
    raise ConfigError(f"[schedd.metrics] address: {address!r} is not an IP address or host name "
                      "(e.g. 127.0.0.1, ::1, 0.0.0.0 for every interface)")


def _metrics(m: Any) -> dict[str, Any]:
    m = _unknown_keys("schedd.metrics", m, _METRICS_KEYS)
    out: dict[str, Any] = {}
    if "textfile" in m:
        if not isinstance(m["textfile"], str) or not m["textfile"].endswith(".prom"):
            raise ConfigError("[schedd.metrics] textfile: must be a path ending in .prom")
        out["metrics_textfile"] = m["textfile"]
    if "port" in m:
        port = _num("schedd.metrics", "port", m["port"], 0, 65535)
        if not port.is_integer():
            raise ConfigError(f"[schedd.metrics] port: must be a whole number, got {m['port']!r}")
        out["metrics_port"] = int(port)
    if "address" in m:
        if not isinstance(m["address"], str):
            raise ConfigError("[schedd.metrics] address: must be a string")
        out["metrics_address"] = check_address(m["address"])
    return out


def _policy(p: Any, check: Callable[[str, Mapping[str, float]], None]) -> dict[str, Any]:
    p = _unknown_keys("policy", p, _POLICY_KEYS)
    name = p.get("name", "fair")
    if not isinstance(name, str):
        raise ConfigError("[policy] name: must be a string")
    raw = p.get("knobs", {})
    if not isinstance(raw, Mapping):
        raise ConfigError("[policy.knobs] must be a table")
    knobs = {str(k): _num("policy.knobs", str(k), v, -math.inf) for k, v in raw.items()}
    try:
        check(name, knobs)
    except HaseError as exc:
        raise ConfigError(f"[policy] {exc}") from exc
    return {"policy": name, "knobs": knobs}


def load_config(path: str | Path | None, **checks: Any) -> DaemonConfig:
    """Read and validate a TOML file (None = all defaults, still validated)."""
    if path is None:
        return from_mapping({}, **checks)
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config {path}: {not_utf8(exc)}; TOML files are UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config {path}: {exc}") from exc
    return from_mapping(data, **checks)
