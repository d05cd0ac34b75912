"""Where a local cluster keeps its files."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from slurm_hase.errors import ClusterError
from slurm_hase.files import replace_whole

DEFAULT_DIR = "/var/lib/slurm-hase/cluster"
# what slurm.conf, gres.conf and mariadb.cnf hold unquoted: a space ends the value, '#' starts a
# comment, '[0-3]' and ',' are hostlists in gres.conf, '%n' is expanded in slurm.conf's paths
_PLAIN_PATH = re.compile(r"[A-Za-z0-9/._+@~-]+")
_SOCKET_MAX = 107  # sun_path holds 108 bytes, the last a NUL


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


def root_problem(paths: ClusterPaths) -> str | None:
    """Why the config files cannot name this cluster root (None if they can)."""
    root = str(paths.root)
    if not _PLAIN_PATH.fullmatch(root):
        odd = sorted({c for c in root if not _PLAIN_PATH.fullmatch(c)})
        return (f"the cluster folder {root!r} has characters Slurm's and MariaDB's config files "
                f"cannot hold ({' '.join(repr(c) for c in odd)}); choose a --dir "
                "(HASE_CLUSTER_DIR) of letters, digits and / . _ + @ ~ -")
    sockets = (paths.munge_socket, paths.mysql_run / "mysqld.sock")
    longest = max(len(os.fsencode(s)) for s in sockets)
    if longest > _SOCKET_MAX:
        return (f"the cluster folder {root} is too long for the Unix sockets under it "
                f"({longest} bytes, at most {_SOCKET_MAX}); choose a shorter --dir "
                f"(HASE_CLUSTER_DIR), at most {_SOCKET_MAX - longest + len(root)} characters")
    return None


def write_private(path: Path, text: str) -> None:
    """Replace `path` by a file holding `text` that only its owner can read, from the first
    byte on (files.replace_whole)."""
    replace_whole(path, text, mode=0o600)


def check_enterable(root: Path) -> None:
    """MariaDB runs as `mysql`: every folder above the cluster root must let others enter it
    (x for others), or MariaDB times out with an empty log. ClusterError names the folder."""
    for folder in root.parents:
        mode = folder.stat().st_mode
        if not mode & 0o001:
            raise ClusterError(
                f"{folder} (mode {mode & 0o777:04o}) cannot be entered by other users, and "
                f"MariaDB runs as mysql under {root}: chmod o+x {folder}, or choose a --dir "
                "(HASE_CLUSTER_DIR) outside it")


NVIDIA_MAJOR = 195  # the character-device major number of /dev/nvidiaN


def make_gpu_device(path: Path, minor: int, device_node: bool) -> None:
    """A fake GPU's file for gres.conf's File=: an empty regular file, or (`device_node`) a
    character device node like /dev/nvidia<minor>, which Slurm then reads as a GPU: it sets
    CUDA_VISIBLE_DEVICES and SLURM_JOB_GPUS for the job's prolog, epilog and tasks, as on a real
    GPU node (it leaves both out for regular files). Nothing opens the node."""
    if not device_node:
        path.touch()
        return
    try:
        if path.is_char_device():
            return
        path.unlink(missing_ok=True)
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, minor))
    except OSError as exc:
        raise ClusterError(f"cannot make the fake GPU device node {path} ({exc.strerror or exc}):"
                           " gpu_device_nodes needs root with CAP_MKNOD") from None
