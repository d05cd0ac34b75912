"""Render the systemd unit (templates/hase-schedd.service.j2)."""

from __future__ import annotations

import sys
from pathlib import Path

import jinja2

from slurm_hase.errors import ConfigError

UNIT_TEMPLATE = "hase-schedd.service.j2"


def template_dirs(extra: str | Path | None = None) -> list[Path]:
    """Where the template is looked up: `extra`, the source tree, the installed share dir."""
    dirs = [Path(extra)] if extra else []
    dirs += [Path(__file__).resolve().parents[2] / "templates",
             Path(sys.prefix) / "share" / "slurm-hase" / "templates"]
    return dirs


def _plain(name: str, value: str) -> str:
    if not value or any(c in value for c in "\n\r\0") or value != value.strip():
        raise ConfigError(f"{name}: {value!r} cannot go into a unit file")
    return value


def render_unit(*, config_path: str, exec_start: str | None = None, user: str = "root",
                slurm_conf: str | None = None, state_dir: str | None = "slurm-hase",
                template_dir: str | Path | None = None) -> str:
    """The unit file text; every value is checked to be one plain line."""
    dirs = [d for d in template_dirs(template_dir) if (d / UNIT_TEMPLATE).is_file()]
    if not dirs:
        raise ConfigError(f"{UNIT_TEMPLATE} not found in {', '.join(map(str, template_dirs(template_dir)))}")
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(dirs[0])),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             autoescape=False)  # noqa: S701 - a unit file, not HTML
    beside = Path(sys.executable).parent / "hase"
    exec_cmd = exec_start or (str(beside) if beside.is_file() else "/usr/local/bin/hase")
    docs = Path(__file__).resolve().parents[2] / "docs" / "daemon.md"
    return env.get_template(UNIT_TEMPLATE).render(
        config_path=_plain("config", str(Path(config_path).resolve())),
        exec_start=_plain("exec", exec_cmd), user=_plain("user", user),
        slurm_conf=_plain("slurm_conf", slurm_conf) if slurm_conf else None,
        state_dir=_plain("state_dir", state_dir) if state_dir else None, docs_path=str(docs))
