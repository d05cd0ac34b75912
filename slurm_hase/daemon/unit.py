"""Render the systemd unit (templates/hase-schedd.service.j2).

Values are quoted for systemd here, not in the template: ExecStart= words per
systemd.service(5) "Command lines" ("..." with backslash escapes; `%` specifiers and, in
arguments, `$` variables doubled), the Environment= assignment per systemd.exec(5).
"""

from __future__ import annotations

import re
import sys
import urllib.parse
from pathlib import Path

import jinja2

from slurm_hase.errors import ConfigError

UNIT_TEMPLATE = "hase-schedd.service.j2"

# characters a word may hold without quotes (after % and $ are doubled)
_BARE = re.compile(r"[A-Za-z0-9_@%$+=:,./-]+")
# systemd's strict user names (at most 31 characters, not starting with a digit, '-' or '.'),
# with '.' allowed inside as its relaxed rules do
_USER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,30}")
_EXEC_PREFIXES = "-@:+!|"  # read by systemd as ExecStart= flags, not as part of the path


def template_dirs(extra: str | Path | None = None) -> list[Path]:
    """Where the template is looked up: `extra`, the source tree, the installed share dir."""
    dirs = [Path(extra)] if extra else []
    dirs += [Path(__file__).resolve().parents[2] / "templates",
             Path(sys.prefix) / "share" / "slurm-hase" / "templates"]
    return dirs


def docs_dirs() -> list[Path]:
    """Where the docs are: the source tree, then the installed share/doc/slurm-hase."""
    return [Path(__file__).resolve().parents[2] / "docs",
            Path(sys.prefix) / "share" / "doc" / "slurm-hase"]


def daemon_docs() -> Path | None:
    """docs/daemon.md where this installation has it (None: installed without docs)."""
    return next((d / "daemon.md" for d in docs_dirs() if (d / "daemon.md").is_file()), None)


def plain_value(name: str, value: str) -> str:
    """`value` when it fits one line of a unit file; ConfigError naming `name` otherwise."""
    if not value or value != value.strip() or not value.isprintable():  # newlines, tabs, NUL
        raise ConfigError(f"{name}: {value!r} cannot go into a unit file")
    return value


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def exec_word(value: str, *, executable: bool = False) -> str:
    """One ExecStart= word: `%` -> `%%`, `$` -> `$$` (not in the executable's path, which
    systemd does not expand), "..."-quoted unless plain."""
    escaped = value.replace("%", "%%")
    if not executable:
        escaped = escaped.replace("$", "$$")
    return escaped if _BARE.fullmatch(escaped) else _quoted(escaped)


def environment_assignment(name: str, value: str) -> str:
    """An Environment= value `NAME=value`: `%` -> `%%`, "..."-quoted unless plain."""
    assignment = f"{name}={value}".replace("%", "%%")
    return assignment if _BARE.fullmatch(assignment) else _quoted(assignment)


def default_hase() -> str:
    """The `hase` beside this Python (a virtualenv's), else /usr/local/bin/hase."""
    beside = Path(sys.executable).parent / "hase"
    return str(beside) if beside.is_file() else "/usr/local/bin/hase"


def check_user(user: str) -> str:
    """A user name (or numeric UID) systemd's User= accepts; ConfigError otherwise."""
    plain_value("user", user)
    if user.isdigit() and user.isascii():
        uid = int(user)
        if uid < 2**32 - 1 and uid != 65535:
            return user
    elif _USER_NAME.fullmatch(user):
        return user
    raise ConfigError(f"user: {user!r} is not a valid user name (letters, digits, '_', '-', "
                      "'.', not starting with a digit, '-' or '.', at most 31 characters) "
                      "or numeric UID")


def _exec_path(value: str) -> str:
    plain_value("exec", value)
    if value[0] in _EXEC_PREFIXES:
        raise ConfigError(f"exec: {value!r} starts with {value[0]!r}, which systemd reads as "
                          "an ExecStart= prefix; give the absolute path of `hase`")
    if bad := sorted({c for c in value if c in "\"'\\"}):
        raise ConfigError(f"exec: {value!r} contains {', '.join(map(repr, bad))}, which systemd refuses "
                          "in the executable's path")
    return value


def render_unit(*, config_path: str, exec_start: str | None = None, user: str = "root",
                slurm_conf: str | None = None, state_dir: str | None = "slurm-hase",
                template_dir: str | Path | None = None) -> str:
    """The unit file text; every value is checked to be one plain line and quoted for systemd."""
    dirs = [d for d in template_dirs(template_dir) if (d / UNIT_TEMPLATE).is_file()]
    if not dirs:
        raise ConfigError(f"{UNIT_TEMPLATE} not found in {', '.join(map(str, template_dirs(template_dir)))}")
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(dirs[0])),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             autoescape=False)  # noqa: S701 - a unit file, not HTML
    exec_cmd = exec_start or default_hase()
    docs = daemon_docs()
    slurm_env = (environment_assignment("SLURM_CONF", plain_value("slurm_conf", slurm_conf))
                 if slurm_conf else None)
    return env.get_template(UNIT_TEMPLATE).render(
        config_path=exec_word(plain_value("config", str(Path(config_path).resolve()))),
        exec_start=exec_word(_exec_path(exec_cmd), executable=True), user=check_user(user),
        slurm_conf_env=slurm_env,
        state_dir=plain_value("state_dir", state_dir) if state_dir else None,
        docs_path=urllib.parse.quote(str(docs)).replace("%", "%%") if docs else None)


def write_unit(path: str | Path, text: str) -> None:
    """Write the unit file; ConfigError naming the path when it cannot be written."""
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write unit file {path}: {exc.strerror or exc}") from exc
