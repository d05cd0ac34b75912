"""Render the systemd service and timer that run `hase gpu mps sweep` on a GPU node
(templates/hase-mps-sweep.{service,timer}.j2), beside the scripts they sweep for."""

from __future__ import annotations

from pathlib import Path

from slurm_hase.daemon.unit import default_hase, environment_assignment, exec_word, plain_value
from slurm_hase.errors import ConfigError
from slurm_hase.files import replace_whole
from slurm_hase.mps.render import template_environment

UNIT_FILES = {"sweep-service": "hase-mps-sweep.service", "sweep-timer": "hase-mps-sweep.timer"}
MAX_EVERY_MIN = 24 * 60


def render_units(scripts_dir: Path, *, every_min: int = 15, hase: str | None = None,
                 slurm_conf: str | None = None) -> dict[str, str]:
    """The service and timer texts, by UNIT_FILES key. `scripts_dir` is where the prolog and
    epilog live (made absolute); `slurm_conf` goes into Environment= when given."""
    if not 1 <= every_min <= MAX_EVERY_MIN:
        raise ConfigError(f"sweep_every_min must be 1..{MAX_EVERY_MIN} minutes, not {every_min}")
    exe = plain_value("hase", hase or default_hase())
    if not exe.startswith("/"):
        raise ConfigError(f"hase: {exe!r} must be an absolute path (systemd runs it as given)")
    folder = plain_value("scripts_dir", str(scripts_dir.resolve()))
    env = template_environment()  # values are quoted for systemd here, not by the templates
    values = {
        "exec_start": exec_word(exe, executable=True),
        "scripts_dir": exec_word(folder),
        "scripts_dir_comment": folder,
        "service_path_comment": f"{folder}/{UNIT_FILES['sweep-service']}",
        "timer_path_comment": f"{folder}/{UNIT_FILES['sweep-timer']}",
        "slurm_conf_env": (environment_assignment("SLURM_CONF", plain_value("slurm_conf", slurm_conf))
                           if slurm_conf else None),
        "every_min": every_min,
    }
    return {key: env.get_template(f"{name}.j2").render(**values)
            for key, name in UNIT_FILES.items()}


def write_units(scripts_dir: Path, texts: dict[str, str]) -> dict[str, Path]:
    """Write the units beside the scripts (mode 0644); ConfigError names a path that fails."""
    written: dict[str, Path] = {}
    for key, text in texts.items():
        path = scripts_dir / UNIT_FILES[key]
        try:
            replace_whole(path, text, mode=0o644)
        except OSError as exc:
            raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None
        written[key] = path
    return written
