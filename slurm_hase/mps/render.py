"""Render the MPS prolog/epilog scripts (templates/mps-*.sh.j2) for a node's Slurm config."""

from __future__ import annotations

import posixpath
import re
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path, PurePosixPath
from typing import Any

import jinja2

from slurm_hase.errors import ConfigError
from slurm_hase.files import replace_whole

TEMPLATES = {"prolog": "mps-prolog.sh.j2", "epilog": "mps-epilog.sh.j2"}
FAILURE_POLICIES = ("drain", "ignore")
PLUGSTACK_FILE = "hase-mps-plugstack.conf"
# Characters pipe_dir/log_dir/plugin may hold: plugstack.conf splits its arguments on whitespace,
# and spank/hase_mps.c accepts these only (and at most PATH_MAX_CHARS of them).
SAFE_PATH = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")
SAFE_CHARS = "letters, digits and _@%+=:,./-"
PATH_MAX_CHARS = 1023  # HASE_PATH_MAX - 1 in spank/hase_mps.c
# Where the prolog looks up each GPU's UUID from its device minor number (Slurm's GPU number):
# the NVIDIA driver's <PCI bus id>/information files. A parameter for tests (a fake tree).
GPU_INFO_DIR = "/proc/driver/nvidia/gpus"


class MpsConfigError(ConfigError):
    """A bad MpsConfig setting. The message names settings through placeholders, so that a
    front end can name its own options (`--pipe-dir`) instead of the fields (`pipe_dir`)."""

    def __init__(self, template: str, names: Mapping[str, str], **values: object) -> None:
        self.template = template
        self.names = dict(names)  # placeholder in template -> MpsConfig field
        self.values = values  # other placeholders -> values (never parsed as a template)
        super().__init__(self.worded())

    @property
    def settings(self) -> tuple[str, ...]:
        """The MpsConfig fields the message names."""
        return tuple(self.names.values())

    def worded(self, spelling: Mapping[str, str] | None = None) -> str:
        """The message, each field spelt `spelling[field]` (default: the field name)."""
        spelling = spelling or {}
        named = {ph: spelling.get(field, field) for ph, field in self.names.items()}
        return self.template.format(**named, **self.values)


def _bad(field: str, problem: str, **values: object) -> MpsConfigError:
    """An error about one field: "{field} <problem>"."""
    return MpsConfigError("{field} " + problem, {"field": field}, **values)


def _normal_dir(path: str) -> str:
    """"/tmp//a/./b/" -> "/tmp/a/b" (lexically, without touching this host's files)."""
    return "/" + posixpath.normpath(path).lstrip("/")


@dataclass(frozen=True)
class MpsConfig:
    """Settings baked into the scripts and the plugstack.conf line (plugin, pipe_dir, log_dir).

    The defaults lie outside world-writable /tmp (users could make a job's directory first, and
    job_container/tmpfs gives jobs a private /tmp): pipes in /run, logs in /var/log, which
    outlive a reboot for post-mortems and take disk, not RAM.
    """

    pipe_dir: str = "/run/hase-mps"
    log_dir: str = "/var/log/hase-mps"
    on_failure: str = "drain"  # "drain": exit 1 (Slurm drains the node); "ignore": exit 0
    mps_control: str = "nvidia-cuda-mps-control"
    log_file: str = ""  # extra log file; "" = stderr (+ syslog) only
    syslog: bool = True
    start_timeout_s: int = 10
    keep_logs: bool = True
    plugin: str = "/usr/local/lib/slurm/hase_mps.so"  # where `make -C spank install` puts it

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, str) and any(c in value for c in "\n\r\0"):
                raise _bad(f.name, "must be a single line, not {value!r}", value=value)
        for name in ("pipe_dir", "log_dir"):
            value = getattr(self, name)
            if not value.startswith("/") or _normal_dir(value) == "/":
                raise _bad(name, "must be an absolute directory other than /, not {value!r}",
                           value=value)
        for name in ("pipe_dir", "log_dir", "plugin"):
            self._check_plugstack_path(name)
        self._check_dirs_apart()
        if self.log_file and not self.log_file.startswith("/"):
            raise _bad("log_file", "must be an absolute path, not {value!r}", value=self.log_file)
        if self.on_failure not in FAILURE_POLICIES:
            raise _bad("on_failure", "must be one of {choices}, not {value!r}",
                       choices=", ".join(FAILURE_POLICIES), value=self.on_failure)
        if not self.mps_control.strip():
            raise _bad("mps_control", "must name the nvidia-cuda-mps-control binary, not {value!r}",
                       value=self.mps_control)
        if not 1 <= self.start_timeout_s <= 600:
            raise _bad("start_timeout_s", "must be 1..600 seconds, not {value}",
                       value=self.start_timeout_s)

    def _check_plugstack_path(self, name: str) -> None:
        """A path written into plugstack.conf: absolute, safe characters, fits the plugin."""
        value = getattr(self, name)
        if not value.startswith("/"):
            raise _bad(name, "must be an absolute path, not {value!r}", value=value)
        if not SAFE_PATH.fullmatch(value):
            raise _bad(name, "may hold only {chars} (plugstack.conf splits its arguments on"
                       " whitespace), not {value!r}",
                       chars=SAFE_CHARS, value=value)
        if len(value) > PATH_MAX_CHARS:
            raise _bad(name, "is {n} characters long; the SPANK plugin takes at most {max}",
                       n=len(value), max=PATH_MAX_CHARS)

    def _check_dirs_apart(self) -> None:
        """The epilog deletes each job's pipe directory: the log directory must lie elsewhere."""
        pipe, log = PurePosixPath(_normal_dir(self.pipe_dir)), PurePosixPath(_normal_dir(self.log_dir))
        if pipe == log:
            relation = "is the same directory as"
        elif log.is_relative_to(pipe):
            relation = "is inside"
        elif pipe.is_relative_to(log):
            relation = "contains"
        else:
            return
        raise MpsConfigError(
            "{log} {log_value!r} " + relation + " {pipe} {pipe_value!r}: the epilog deletes each"
            " job's pipe directory, and the logs must outlive it; give {log} and {pipe}"
            " directories that do not overlap",
            {"log": "log_dir", "pipe": "pipe_dir"}, log_value=self.log_dir, pipe_value=self.pipe_dir)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> MpsConfig:
        """Build from a config dict: ConfigError for unknown keys, MpsConfigError for bad values."""
        known = {f.name: f.type for f in fields(cls)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ConfigError(f"unknown MPS setting(s) {', '.join(unknown)}; "
                              f"known: {', '.join(known)}")
        for key, value in data.items():
            want: type = bool if known[key] == "bool" else int if known[key] == "int" else str
            if not isinstance(value, want) or (want is int and isinstance(value, bool)):
                raise _bad(key, "must be {want}, not {value!r}", want=want.__name__, value=value)
        return cls(**dict(data))


def template_dirs(extra: Path | None = None) -> list[Path]:
    """Where templates are looked up: `extra`, the source tree, then the installed share dir."""
    dirs = [extra] if extra is not None else []
    dirs.append(Path(__file__).resolve().parents[2] / "templates")
    dirs.append(Path(sys.prefix) / "share" / "slurm-hase" / "templates")
    dirs.append(Path(__file__).resolve().parents[1] / "templates")
    return dirs


def template_environment(template_dir: Path | None = None) -> jinja2.Environment:
    """Jinja over the first of template_dirs holding the MPS templates (ConfigError if none)."""
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


def render(kind: str, config: MpsConfig, template_dir: Path | None = None, *,
           gpu_info_dir: str = GPU_INFO_DIR) -> str:
    """Render the "prolog" or "epilog" script text (gpu_info_dir: see GPU_INFO_DIR)."""
    if kind not in TEMPLATES:
        raise ConfigError(f"unknown MPS script {kind!r}; expected prolog or epilog")
    template = template_environment(template_dir).get_template(TEMPLATES[kind])
    values: dict[str, object] = {f.name: getattr(config, f.name) for f in fields(config)}
    values["gpu_info_dir"] = gpu_info_dir
    return template.render(**values)


def plugstack_line(config: MpsConfig) -> str:
    """The plugstack.conf line that loads the SPANK plugin with the scripts' directories."""
    return f"required {config.plugin} pipe_dir={config.pipe_dir} log_dir={config.log_dir}"


def write_scripts(
    config: MpsConfig, out_dir: Path, template_dir: Path | None = None, *,
    gpu_info_dir: str = GPU_INFO_DIR,
) -> dict[str, Path]:
    """Render both scripts into out_dir as hase-mps-{prolog,epilog}.sh (mode 0755), and the
    matching plugstack.conf line as hase-mps-plugstack.conf (mode 0644; `include` it).

    ConfigError names the path when it cannot be written (no permission, a file in the way).
    """
    texts = {kind: render(kind, config, template_dir, gpu_info_dir=gpu_info_dir)
             for kind in TEMPLATES}
    texts["plugstack"] = ("# slurm-hase MPS: written by `hase gpu mps render` with the prolog/epilog"
                          " in this directory\n" + plugstack_line(config) + "\n")
    written: dict[str, Path] = {}
    path = out_dir
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for kind, text in texts.items():
            path = out_dir / (PLUGSTACK_FILE if kind == "plugstack" else f"hase-mps-{kind}.sh")
            # a rename, never a rewrite in place: bash reads a script as it runs it, and a
            # prolog rewritten while slurmd ran it executed fragments of the new text
            replace_whole(path, text, mode=0o644 if kind == "plugstack" else 0o755)
            written[kind] = path
    except OSError as exc:
        name = path if path != out_dir else exc.filename or path
        raise ConfigError(f"cannot write {name}: {exc.strerror or exc}") from None
    return written


