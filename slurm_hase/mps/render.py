"""Render the MPS prolog/epilog scripts (templates/mps-*.sh.j2) for a node's Slurm config."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import jinja2

from slurm_hase.errors import ConfigError

TEMPLATES = {"prolog": "mps-prolog.sh.j2", "epilog": "mps-epilog.sh.j2"}
FAILURE_POLICIES = ("drain", "ignore")


@dataclass(frozen=True)
class MpsConfig:
    """Settings baked into the scripts. pipe_dir/log_dir must match the SPANK plugin's args."""

    pipe_dir: str = "/tmp/hase-mps"
    log_dir: str = "/tmp/hase-mps-log"
    on_failure: str = "drain"  # "drain": exit 1 (Slurm drains the node); "ignore": exit 0
    mps_control: str = "nvidia-cuda-mps-control"
    log_file: str = ""  # extra log file; "" = stderr (+ syslog) only
    syslog: bool = True
    start_timeout_s: int = 10
    keep_logs: bool = True

    def __post_init__(self) -> None:
        for name in ("pipe_dir", "log_dir"):
            value = getattr(self, name)
            if not value.startswith("/") or value.rstrip("/") == "":
                raise ConfigError(f"mps.{name} must be an absolute directory, not {value!r}")
        if self.log_file and not self.log_file.startswith("/"):
            raise ConfigError(f"mps.log_file must be an absolute path, not {self.log_file!r}")
        if self.on_failure not in FAILURE_POLICIES:
            raise ConfigError(
                f"mps.on_failure must be one of {', '.join(FAILURE_POLICIES)}, not {self.on_failure!r}"
            )
        if not self.mps_control.strip():
            raise ConfigError("mps.mps_control must name the nvidia-cuda-mps-control binary")
        if not 1 <= self.start_timeout_s <= 600:
            raise ConfigError(f"mps.start_timeout_s must be 1..600, not {self.start_timeout_s}")
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, str) and any(c in value for c in "\n\r\0"):
                raise ConfigError(f"mps.{f.name} must be a single line")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> MpsConfig:
        """Build from a config dict (e.g. the [mps] table); unknown keys are an error."""
        known = {f.name: f.type for f in fields(cls)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ConfigError(f"unknown mps config key(s): {', '.join(unknown)}")
        for key, value in data.items():
            want: type = bool if known[key] == "bool" else int if known[key] == "int" else str
            if not isinstance(value, want) or (want is int and isinstance(value, bool)):
                raise ConfigError(f"mps.{key} must be {want.__name__}, not {value!r}")
        return cls(**dict(data))


def template_dirs(extra: Path | None = None) -> list[Path]:
    """Where templates are looked up: `extra`, the source tree, then the installed share dir."""
    dirs = [extra] if extra is not None else []
    dirs.append(Path(__file__).resolve().parents[2] / "templates")
    dirs.append(Path(sys.prefix) / "share" / "slurm-hase" / "templates")
    dirs.append(Path(__file__).resolve().parents[1] / "templates")
    return dirs


def _environment(template_dir: Path | None) -> jinja2.Environment:
    found = [d for d in template_dirs(template_dir) if (d / TEMPLATES["prolog"]).is_file()]
    if not found:
        searched = ", ".join(str(d) for d in template_dirs(template_dir))
        raise ConfigError(f"MPS templates not found (searched {searched})")
    env = jinja2.Environment(  # noqa: S701 - shell scripts, values quoted with shquote
        loader=jinja2.FileSystemLoader(str(found[0])),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["shquote"] = lambda value: shlex.quote(str(value))
    return env


def render(kind: str, config: MpsConfig, template_dir: Path | None = None) -> str:
    """Render the "prolog" or "epilog" script text."""
    if kind not in TEMPLATES:
        raise ConfigError(f"unknown MPS script {kind!r}; expected prolog or epilog")
    template = _environment(template_dir).get_template(TEMPLATES[kind])
    values = {f.name: getattr(config, f.name) for f in fields(config)}
    return template.render(**values)


def write_scripts(
    config: MpsConfig, out_dir: Path, template_dir: Path | None = None
) -> dict[str, Path]:
    """Render both scripts into out_dir as hase-mps-{prolog,epilog}.sh (mode 0755)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for kind in TEMPLATES:
        path = out_dir / f"hase-mps-{kind}.sh"
        path.write_text(render(kind, config, template_dir))
        path.chmod(0o755)
        written[kind] = path
    return written
