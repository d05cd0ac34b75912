"""Render the cluster's config files from templates/ (jinja2)."""

from __future__ import annotations

import sys
from pathlib import Path

import jinja2

from slurm_hase.errors import ConfigError
from slurm_hase.slurm.localcluster.paths import ClusterPaths
from slurm_hase.slurm.localcluster.spec import ClusterSpec


def templates_dir() -> Path:
    """templates/ of a source checkout, else the installed share/slurm-hase/templates."""
    candidates = [
        Path(__file__).resolve().parents[3] / "templates",
        Path(sys.prefix) / "share" / "slurm-hase" / "templates",
    ]
    for candidate in candidates:
        if (candidate / "slurm.conf.j2").is_file():
            return candidate
    raise ConfigError(f"templates not found (looked in {', '.join(map(str, candidates))})")


def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        autoescape=False,  # noqa: S701 - config files, not HTML
    )


def render_configs(
    spec: ClusterSpec,
    paths: ClusterPaths,
    *,
    db_password: str,
    cgroup_plugin: str,
    spank_plugin: str | None = None,
) -> dict[str, str]:
    """File name (under etc/) -> rendered text."""
    env = environment()
    ports = {name: spec.node_port(name) for name in spec.node_names}
    context = {
        "spec": spec, "paths": paths, "ports": ports, "db_password": db_password,
        "cgroup_plugin": cgroup_plugin, "spank_plugin": spank_plugin,
        "prolog": spec.prolog, "epilog": spec.epilog,
    }
    names = ["slurm.conf", "gres.conf", "slurmdbd.conf", "cgroup.conf", "plugstack.conf",
             "mariadb.cnf"]
    return {name: env.get_template(f"{name}.j2").render(**context) for name in names}
