"""Checks of the Slurm client environment that commands run before they contact Slurm.

Slurm's own tools retry a missing `SLURM_CONF` for minutes and name it only in their logs;
these checks refuse it at once with a message that names the variable and the path.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from slurm_hase.errors import ConfigError


def check_slurm_conf(environ: Mapping[str, str]) -> None:
    """Raise ConfigError when SLURM_CONF is set but names no readable regular file."""
    value = environ.get("SLURM_CONF")
    if value is None:
        return
    if not value:
        raise ConfigError("SLURM_CONF is set but empty; unset it or name slurm.conf")
    path = Path(value)
    if not path.exists():
        raise ConfigError(f"SLURM_CONF={value}: no such file")
    if not path.is_file():
        raise ConfigError(f"SLURM_CONF={value}: not a regular file")
    if not os.access(path, os.R_OK):
        raise ConfigError(f"SLURM_CONF={value}: not readable")
