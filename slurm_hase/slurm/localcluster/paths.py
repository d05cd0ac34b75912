"""Where a local cluster keeps its files."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_DIR = "/var/lib/slurm-hase/cluster"


@dataclass(frozen=True)
class ClusterPaths:
    """Directories of one local cluster, all under one root."""

    root: Path

    @property
    def etc(self) -> Path:
        return self.root / "etc"

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def log(self) -> Path:
        return self.root / "log"

    @property
    def dev(self) -> Path:
        return self.root / "dev"

    @property
    def slurm_conf(self) -> Path:
        return self.etc / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.run / "munge" / "munge.socket"

    @property
    def munge_key(self) -> Path:
        return self.etc / "munge.key"

    @property
    def pids_file(self) -> Path:
        return self.run / "pids.json"

    @property
    def lock_file(self) -> Path:
        return self.root / "cluster.lock"  # held while `up` or `down` runs (services.exclusive)

    @property
    def mysql_run(self) -> Path:
        return self.run / "mysql"  # MariaDB's socket and pid (owned by mysql)

    @property
    def mysql_log(self) -> Path:
        return self.log / "mysql"  # MariaDB's error log (owned by mysql)

    @property
    def mariadb_cnf(self) -> Path:
        return self.etc / "mariadb.cnf"

    @property
    def db_password_file(self) -> Path:
        return self.etc / "db-password"

    def all_dirs(self) -> list[Path]:
        return [self.etc, self.state, self.run, self.log, self.dev, self.munge_socket.parent,
                self.state / "ctld", self.state / "spool", self.state / "munge"]


def cluster_paths(root: str | Path | None = None) -> ClusterPaths:
    """The cluster root: argument, else $HASE_CLUSTER_DIR, else /var/lib/slurm-hase/cluster."""
    chosen = root or os.environ.get("HASE_CLUSTER_DIR") or DEFAULT_DIR
    return ClusterPaths(Path(chosen).resolve())
