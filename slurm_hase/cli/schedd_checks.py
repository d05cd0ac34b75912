"""Checks of the paths and ids `hase schedd` is given, before anything is written."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import click

from slurm_hase.daemon.config import DEFAULT_DB
from slurm_hase.errors import ConfigError, StoreError

if TYPE_CHECKING:
    from slurm_hase.daemon.config import DaemonConfig
    from slurm_hase.store.state import StateStore


def not_a_folder(state_db: str) -> None:
    """ConfigError when the state store path names a directory."""
    if Path(state_db).is_dir():
        raise ConfigError(f"state store {state_db} is a directory, not a database file "
                          "(fix --state-db / [schedd] state_db)")


def existing_store(cfg: DaemonConfig) -> StateStore:
    """Open the state store; StoreError (and no file created) when there is none."""
    from slurm_hase.store.state import StateStore

    not_a_folder(cfg.state_db)
    path = Path(cfg.state_db)
    if not path.is_file() or path.stat().st_size == 0:
        what = "an empty file" if path.is_file() else "no state store"
        raise StoreError(f"{what} at {cfg.state_db}: the daemon has not run with this store; "
                         "pass the daemon's --config (its [schedd] state_db) or --state-db")
    return StateStore(cfg.state_db)


def state_folder(state_db: str) -> None:
    """The store's folder must exist: the default one (/var/lib/slurm-hase, which the unit's
    StateDirectory= also makes) is created, any other missing one is refused, naming it."""
    if state_db == ":memory:":
        return
    not_a_folder(state_db)
    folder = Path(state_db).parent
    if state_db == DEFAULT_DB and not folder.exists():
        try:
            folder.mkdir(parents=True, mode=0o755)
        except OSError as exc:
            raise StoreError(f"cannot create {folder} for the state store: "
                             f"{exc.strerror or exc}") from exc
    if not folder.is_dir():
        raise ConfigError(f"state store {state_db}: folder {folder} does not exist (create it "
                          "first, or fix --state-db / [schedd] state_db)")


def textfile_folder(textfile: str) -> None:
    """The metrics textfile's folder must exist and be writable (never created)."""
    target = Path(textfile)
    if target.is_dir():
        raise ConfigError(f"[schedd.metrics] textfile: {textfile} is a directory")
    if not target.parent.is_dir():
        raise ConfigError(f"[schedd.metrics] textfile: folder {target.parent} does not exist")
    if not os.access(target.parent, os.W_OK | os.X_OK):
        raise ConfigError(f"[schedd.metrics] textfile: folder {target.parent} is not writable")


def slurm_job_id(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    """A Slurm job id as the daemon records it: a positive number (leading zeros dropped)."""
    if re.fullmatch(r"\d+_(\d+|\[[^\]]*\])", value):
        raise click.BadParameter(
            f"{value!r} is an array task; the daemon records each job under its own numeric "
            f"job id (`squeue -h -o %A -j {value}` prints it)")
    if not (value.isascii() and value.isdigit()) or int(value) == 0:
        raise click.BadParameter(f"{value!r} is not a Slurm job id (a positive number, e.g. 4242)")
    return str(int(value))


def unit_exec(value: str) -> str:
    """--exec for ExecStart=: an absolute path, or a bare name found on PATH (made absolute)."""
    if os.path.isabs(value):
        return value
    if "/" in value:
        raise ConfigError(f"--exec {value!r}: give an absolute path (systemd refuses a relative "
                          "executable path)")
    found = shutil.which(value)
    if found is None:
        raise ConfigError(f"--exec {value!r}: not found on PATH; give the absolute path of `hase`")
    return os.path.abspath(found)


def unit_slurm_conf(value: str, source: str = "--slurm-conf") -> str:
    """--slurm-conf (or the SLURM_CONF it defaults to, `source`) must name an existing file;
    made absolute (the unit runs in /)."""
    path = Path(value)
    if not path.exists():
        raise ConfigError(f"{source} {value}: no such file")
    if not path.is_file():
        raise ConfigError(f"{source} {value}: not a regular file")
    return str(path.absolute())


_PRIVATE_TMP = ("/tmp", "/var/tmp")  # the unit's PrivateTmp=true gives the service its own
_READ_ONLY = ("/usr", "/boot", "/efi", "/etc")  # ProtectSystem=full makes these read-only


def _under(path: str, roots: tuple[str, ...]) -> str | None:
    resolved = os.path.abspath(path)
    return next((r for r in roots if resolved == r or resolved.startswith(r + "/")), None)


def unit_sandbox_warnings(config_path: str, cfg: DaemonConfig | None) -> list[str]:
    """What the rendered unit's sandbox (PrivateTmp=true, ProtectSystem=full) would hide from
    the service or keep it from writing, one line each; `cfg` None when the config is absent."""
    read = [("the config", config_path)]
    written: list[tuple[str, str]] = []
    if cfg is not None:
        read += [("the model", cfg.model)] if cfg.model and cfg.model != "shipped" else []
        written = [("the state store", cfg.state_db)]
        written += [("the metrics textfile", cfg.metrics_textfile)] if cfg.metrics_textfile else []
    out = []
    for what, path in read + written:
        if (tmp := _under(path, _PRIVATE_TMP)) is not None:
            out.append(f"{what} {path} is under {tmp}, and the service gets a private {tmp} "
                       "(PrivateTmp=true): it will not see it; move it elsewhere")
    for what, path in written:
        if (ro := _under(path, _READ_ONLY)) is not None:
            out.append(f"{what} {path} is under {ro}, which the service may not write "
                       "(ProtectSystem=full); use /var/lib/slurm-hase (the unit's StateDirectory)")
    return out
