"""`hase cluster up|down|status`: one command for a real local heterogeneous Slurm cluster."""

from __future__ import annotations

import os
import re
import secrets
import shlex
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from slurm_hase.errors import ClusterError, SlurmError
from slurm_hase.files import replace_whole
from slurm_hase.slurm.localcluster.paths import (
    DEFAULT_DIR,
    ClusterPaths,
    check_enterable,
    make_gpu_device,
    root_problem,
    write_private,
)
from slurm_hase.slurm.localcluster.render import render_configs
from slurm_hase.slurm.localcluster.saved import saved_state_problem
from slurm_hase.slurm.localcluster.services import (
    ProcessTable,
    Service,
    exclusive,
    pid_running,
    port_in_use,
    port_open,
    start_service,
    stop_pid,
    stray_stepds,
    wait_for,
)
from slurm_hase.slurm.localcluster.spec import ClusterSpec
from slurm_hase.slurm.localcluster.status import (
    ClusterStatus,
    expected_services,
    not_ready_text,
)
from slurm_hase.slurm.runner import SubprocessRunner

REQUIRED_BINARIES = {
    "slurmctld": "slurm-wlm", "slurmd": "slurm-wlm", "sbatch": "slurm-wlm",
    "slurmdbd": "slurmdbd", "munged": "munge", "mungekey": "munge",
    "mariadbd": "mariadb-server", "mariadb-install-db": "mariadb-server", "mariadb": "mariadb-client",
}
SBIN_PATH = "/usr/local/sbin:/usr/sbin:/sbin"  # where Debian puts the daemons (not on a user's PATH)

Progress = Callable[[str], None]


class LocalCluster:
    """A local cluster described by `spec`, kept under `paths.root`."""

    def __init__(self, spec: ClusterSpec, paths: ClusterPaths) -> None:
        self.spec = spec
        self.paths = paths
        # the daemons are in /usr/sbin, which a non-login root shell or sudo may leave off PATH
        self.env = {"SLURM_CONF": str(paths.slurm_conf),
                    "PATH": f"{os.environ.get('PATH', '')}:{SBIN_PATH}"}
        self.runner = SubprocessRunner(self.env)
        self.table = ProcessTable(paths)
        self._release: tuple[int, int] | None = None  # _slurm_version
        self._deadline = 0.0  # when `up`'s --timeout runs out (time.monotonic)

    # ---- queries -------------------------------------------------------------------------
    def node_states(self) -> dict[str, str]:
        """Node -> base state from sinfo (empty if slurmctld does not answer)."""
        try:
            res = self.runner.run(["sinfo", "-N", "-h", "-o", "%N %T"], timeout_s=10)
        except SlurmError:
            return {}
        if res.returncode != 0:
            return {}
        states: dict[str, str] = {}
        for line in res.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2:
                states[parts[0]] = parts[1].rstrip("*~#!%$@^-").upper()
        return states

    def accounting_ok(self) -> bool:
        try:
            res = self.runner.run(["sacct", "-a", "-X", "-n", "-S", "now-1minute"], timeout_s=10)
        except SlurmError:
            return False
        return res.returncode == 0

    def status(self) -> ClusterStatus:
        running = self.table.alive()
        status = ClusterStatus(str(self.paths.root), str(self.paths.slurm_conf), running,
                               expected_nodes=len(self.spec.node_names),
                               expected_processes=expected_services(self.spec.node_names))
        if "slurmctld" in running:
            status.node_states = self.node_states()
        if "slurmdbd" in running:
            status.accounting = self.accounting_ok()
        return status

    # ---- up ------------------------------------------------------------------------------
    def up(self, progress: Progress = lambda _: None, timeout_s: float = 90.0) -> ClusterStatus:
        """Start everything that is not running; idempotent, also when run twice at once (the
        second waits for the first). Returns when ready."""
        if os.geteuid() != 0:
            raise ClusterError("hase cluster up must run as root: it starts munged, MariaDB and "
                               "Slurm's daemons under their own users (sudo hase cluster up)")
        problem = root_problem(self.paths)
        if problem is not None:
            raise ClusterError(problem)
        self._check_binaries()
        with exclusive(self.paths.lock_file):
            return self._up(progress, timeout_s)

    def _up(self, progress: Progress, timeout_s: float) -> ClusterStatus:
        already = self.table.alive()
        changed = self._changed_configs() if already else []
        if changed:  # rendering them anew would start the rest on configs the others lack
            raise ClusterError(
                f"the cluster under {self.paths.root} runs ({', '.join(sorted(already))}) "
                f"with other configs than this spec and checkout render ({', '.join(changed)} "
                "differ: a changed spec or template, or the SPANK plugin built since); run "
                f"'hase cluster down{self._dir_arg()}', then 'hase cluster up{self._dir_arg()}'")
        status = self.status() if already else None
        if status is not None and status.ready:
            progress("already up")
            return status
        self._check_ports(already)
        if "slurmctld" not in already:
            self._check_saved_state()
        started = time.monotonic()
        self._deadline = started + timeout_s
        try:
            self._start_all(progress)
            wait_for("all nodes idle and sacct answering", lambda: self.status().ready,
                     max(30.0, self._deadline - time.monotonic()), self.paths.log / "slurmctld.log")
        except (ClusterError, SlurmError) as exc:
            raise ClusterError(f"{exc}\n{self._not_ready()}") from None
        progress(f"ready in {time.monotonic() - started:.1f}s")
        return self.status()

    def _start_all(self, progress: Progress) -> None:
        self._prepare(progress)
        self._start_munge(progress)
        self._start_mariadb(progress)
        self._start_slurmdbd(progress)
        self._register_accounts(progress)
        self._start_slurm(progress)

    def _dir_arg(self) -> str:
        """' --dir ROOT' for a command naming this cluster, '' for the default folder."""
        root = str(self.paths.root)
        return "" if root == DEFAULT_DIR else f" --dir {shlex.quote(root)}"

    def _wait_s(self, floor: float) -> float:
        """How long one daemon may take to start: `floor`, or what is left of `up`'s timeout
        if more (a first slurmdbd start makes its tables, which may take minutes)."""
        return max(floor, self._deadline - time.monotonic())

    def _not_ready(self) -> str:
        """What keeps the cluster from being ready, and what runs, in words an admin can act on
        (a failed start leaves what it started running: up again goes on from there)."""
        status = self.status()
        text = not_ready_text(status, self.spec.node_names)
        if status.processes:
            text += (f"\n  running: {', '.join(status.processes)}; once fixed, "
                     f"'hase cluster up{self._dir_arg()}' starts the rest, "
                     f"'hase cluster down{self._dir_arg()}' stops them")
        return text

    def _rendered(self) -> dict[str, str]:
        """The config files this spec and checkout render (needs the db password file)."""
        return render_configs(
            self.spec, self.paths, db_password=self.paths.db_password_file.read_text().strip(),
            cgroup_plugin=self._cgroup_plugin(), spank_plugin=self._spank_plugin())

    def _changed_configs(self) -> list[str]:
        """Config files in etc/ that differ from what would be rendered now."""
        try:
            rendered = self._rendered()
        except OSError:
            return []
        changed = []
        for name, text in rendered.items():
            try:
                if (self.paths.etc / name).read_text() != text:
                    changed.append(name)
            except OSError:
                changed.append(name)
        return changed

    def _check_binaries(self) -> None:
        path = f"{os.environ.get('PATH', '')}:{SBIN_PATH}"
        missing = sorted({pkg for b, pkg in REQUIRED_BINARIES.items()
                          if shutil.which(b, path=path) is None})
        if missing:
            raise ClusterError("missing Debian packages: " + " ".join(missing)
                               + " (apt-get install " + " ".join(missing) + ")")

    def _check_ports(self, already: dict[str, int]) -> None:
        wanted = {"slurmctld": self.spec.slurmctld_port, "slurmdbd": self.spec.slurmdbd_port,
                  "mariadb": self.spec.mariadb_port}
        wanted.update({f"slurmd-{n}": self.spec.node_port(n) for n in self.spec.node_names})
        for service, port in wanted.items():
            if service not in already and port_in_use(port):
                raise ClusterError(
                    f"port {port} (wanted by {service}) is already in use by another program; "
                    "stop it or set port_base/slurmd_port_base in the cluster spec")

    def _prepare(self, progress: Progress) -> None:
        progress(f"rendering configs into {self.paths.etc}")
        for d in self.paths.all_dirs():
            d.mkdir(parents=True, exist_ok=True)
        # root's daemons keep pids, sockets and logs in run/ and log/: nobody else may write
        # there (earlier versions left them 0777 for MariaDB, which now has its own folders)
        for d in (self.paths.root, self.paths.state, self.paths.run, self.paths.log):
            os.chmod(d, 0o755)
        check_enterable(self.paths.root)
        if not self.paths.db_password_file.exists():
            write_private(self.paths.db_password_file, secrets.token_hex(12))
        for name, text in self._rendered().items():
            target = self.paths.etc / name
            if name == "slurmdbd.conf":
                write_private(target, text)  # the database password: never readable by others
            else:
                replace_whole(target, text, mode=0o644)
        for group in self.spec.node_groups:
            for node in group.names:
                for i in range(group.gpus):
                    make_gpu_device(self.paths.dev / f"{node}-nvidia{i}", i,
                                    self.spec.gpu_device_nodes)

    def _check_saved_state(self) -> None:
        """Refuse a folder whose saved state this host's Slurm or MariaDB cannot read."""
        problem = saved_state_problem(self.paths.root, self.paths.state, self._slurm_version,
                                      self._mariadb_version)
        if problem is not None:
            raise ClusterError(problem)

    def _mariadb_version(self) -> str:
        res = self.runner.run(["mariadbd", "--version"], timeout_s=10)
        return res.stdout + res.stderr

    def _slurm_version(self) -> tuple[int, int]:
        """The installed Slurm's (major, minor), read once (saved state check, configs)."""
        if self._release is None:
            res = self.runner.run(["slurmd", "-V"], timeout_s=10)
            match = re.search(r"(\d+)\.(\d+)", res.stdout + res.stderr)
            if match is None:
                raise ClusterError(f"cannot read Slurm version from 'slurmd -V': {res.stdout!r}")
            self._release = int(match[1]), int(match[2])
        return self._release

    def _cgroup_plugin(self) -> str:
        return "disabled" if self._slurm_version() >= (23, 11) else "autodetect"

    def _spank_plugin(self) -> str | None:
        built = Path(__file__).resolve().parents[3] / "spank" / "hase_mps.so"
        return str(built) if built.is_file() else None

    def _start_munge(self, progress: Progress) -> None:
        progress("starting munged")
        if not self.paths.munge_key.exists():
            self.runner.run(["mungekey", "-c", "-k", str(self.paths.munge_key)]).check()
        os.chmod(self.paths.munge_key, 0o600)
        os.chmod(self.paths.munge_socket.parent, 0o755)
        if "munged" not in self.table.alive():  # a socket left by a crash is no sign of life
            self.paths.munge_socket.unlink(missing_ok=True)
        svc = Service("munged", (
            "munged", "-F", "-f", f"--socket={self.paths.munge_socket}",
            f"--key-file={self.paths.munge_key}", f"--pid-file={self.paths.run}/munged.pid",
            f"--log-file={self.paths.log}/munged.log",
            f"--seed-file={self.paths.state}/munge/munged.seed"), "munged")
        pid = start_service(self.runner, self.table, self.paths, svc, self.env)
        wait_for("munged", self.paths.munge_socket.exists, self._wait_s(15),
                 self.paths.log / "munged.out", lambda: pid_running(pid))

    def _mariadb(self, *sql: str) -> None:
        sock = f"--socket={self.paths.mysql_run}/mysqld.sock"
        for statement in sql:
            self.runner.run(["mariadb", sock, "-u", "root", "-e", statement], timeout_s=30).check()

    def _start_mariadb(self, progress: Progress) -> None:
        progress("starting MariaDB")
        datadir = self.paths.state / "mysql"
        cnf = f"--defaults-file={self.paths.mariadb_cnf}"
        fresh = not (datadir / "mysql").is_dir()
        if fresh:
            datadir.mkdir(parents=True, exist_ok=True)
            shutil.chown(datadir, "mysql", "mysql")
            self.runner.run(["mariadb-install-db", cnf, "--user=mysql", "--skip-test-db"],
                            timeout_s=120).check()
        for path in (self.paths.mysql_run, self.paths.mysql_log):  # MariaDB runs as mysql
            path.mkdir(exist_ok=True)
            shutil.chown(path, "mysql", "mysql")
            os.chmod(path, 0o755)
        svc = Service("mariadb", ("mariadbd", cnf, "--user=mysql"), "mariadbd")
        pid = start_service(self.runner, self.table, self.paths, svc, self.env)
        wait_for("MariaDB", lambda: port_open(self.spec.mariadb_port), self._wait_s(60),
                 self.paths.mysql_log / "mariadb.log", lambda: pid_running(pid))
        password = self.paths.db_password_file.read_text().strip()
        self._mariadb(
            f"CREATE DATABASE IF NOT EXISTS slurm_acct_{self.spec.name}",
            f"CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '{password}'",
            f"CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '{password}'",
            # a db-password made anew (etc/ wiped, state/ kept) replaces the old one
            f"ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{password}'",
            f"ALTER USER 'slurm'@'localhost' IDENTIFIED BY '{password}'",
            f"GRANT ALL ON slurm_acct_{self.spec.name}.* TO 'slurm'@'127.0.0.1'",
            f"GRANT ALL ON slurm_acct_{self.spec.name}.* TO 'slurm'@'localhost'")

    def _start_slurmdbd(self, progress: Progress) -> None:
        progress("starting slurmdbd")
        svc = Service("slurmdbd", ("slurmdbd", "-D"), "slurmdbd")
        pid = start_service(self.runner, self.table, self.paths, svc, self.env)
        wait_for("slurmdbd", lambda: port_open(self.spec.slurmdbd_port), self._wait_s(60),
                 self.paths.log / "slurmdbd.log", lambda: pid_running(pid))

    def _sacctmgr(self, *args: str) -> None:
        res = self.runner.run(["sacctmgr", "-i", *args], timeout_s=30)
        said = (res.stdout + res.stderr).lower()
        # what is there already is fine (exit 1 on both releases): 22.05 says "Nothing new
        # added" / "already exists"; 24.11 "Already existing account teama on cluster hase" or,
        # for a user already in the account, "Request didn't affect anything\nNothing added."
        if res.returncode != 0 and not any(
                s in said for s in ("nothing new added", "nothing added", "already exists",
                                    "already existing")):
            res.check()

    def _register_accounts(self, progress: Progress) -> None:
        progress("registering cluster, accounts and users")
        self._sacctmgr("add", "cluster", self.spec.name)
        for account in self.spec.accounts:
            self._sacctmgr("add", "account", account.name, f"fairshare={account.shares}",
                           f"cluster={self.spec.name}")
            for user in account.users:
                self._sacctmgr("add", "user", user, f"account={account.name}",
                               f"cluster={self.spec.name}")
        if self.spec.accounts:
            first = self.spec.accounts[0].name
            users = {u for a in self.spec.accounts for u in a.users}
            for user in sorted(users):
                self._sacctmgr("modify", "user", user, "set", f"defaultaccount={first}")

    def _start_slurm(self, progress: Progress) -> None:
        progress("starting slurmctld")
        ctld = Service("slurmctld", ("slurmctld", "-D", "-i"), "slurmctld")
        pid = start_service(self.runner, self.table, self.paths, ctld, self.env)
        wait_for("slurmctld", lambda: port_open(self.spec.slurmctld_port), self._wait_s(60),
                 self.paths.log / "slurmctld.log", lambda: pid_running(pid))
        progress(f"starting {len(self.spec.node_names)} slurmd")
        for node in self.spec.node_names:
            svc = Service(f"slurmd-{node}", ("slurmd", "-D", "-N", node), "slurmd")
            start_service(self.runner, self.table, self.paths, svc, self.env)

    # ---- restart pieces (fault tests) -----------------------------------------------------
    def stop_service(self, name: str) -> None:
        entry = self.table.load().get(name)
        pid = self.table.alive().get(name)
        if entry and pid is not None:
            stop_pid(pid, str(entry["binary"]))
        self.table.forget(name)

    def start_slurmctld(self) -> None:
        self._start_slurm(lambda _: None)

    # ---- down ----------------------------------------------------------------------------
    def down(self, progress: Progress = lambda _: None) -> list[str]:
        """Stop exactly the processes this cluster started. Returns their names (none, and
        nothing made, for a folder that does not exist: a mistyped --dir)."""
        if not self.paths.root.is_dir():
            return []
        if os.geteuid() != 0:  # the daemons run as root: a traceback (EPERM) otherwise
            if not self.table.alive():
                return []
            raise ClusterError("hase cluster down must run as root: the cluster's daemons run "
                               "as root (sudo hase cluster down)")
        with exclusive(self.paths.lock_file):
            return self._down(progress)

    def _down(self, progress: Progress) -> list[str]:
        running = self.table.alive()
        if "slurmctld" in running:
            try:  # a wedged slurmctld must not keep `down` from stopping it
                self.runner.run(["scancel", "--full", "-u", "root"], timeout_s=10)
            except SlurmError as exc:
                progress(f"scancel failed ({exc}); stopping the daemons anyway")
        order = [n for n in running if n.startswith("slurmd-")] + [
            n for n in ("slurmctld", "slurmdbd", "mariadb", "munged") if n in running]
        entries = self.table.load()
        for name in order:
            progress(f"stopping {name}")
            stop_pid(running[name], str(entries[name]["binary"]))
            self.table.forget(name)
        for pid in stray_stepds(self.paths.slurm_conf):
            stop_pid(pid, "slurmstepd", timeout_s=5)
        return order

