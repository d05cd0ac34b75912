"""Start, watch and stop the processes of a local cluster. Only pids we started are touched."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from slurm_hase.errors import ClusterError
from slurm_hase.files import replace_whole
from slurm_hase.slurm.localcluster.paths import ClusterPaths
from slurm_hase.slurm.runner import SubprocessRunner


@dataclass(frozen=True)
class Service:
    """One daemon: a name, its argv, and the binary name to recognise its pid by."""

    name: str
    argv: tuple[str, ...]
    binary: str


def port_in_use(port: int) -> bool:
    """True if a daemon could not listen on `port` on every address, as slurmctld, slurmd and
    slurmdbd do (a listener on 127.0.0.2 or a LAN address only is in their way too)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))  # noqa: S104 - a test bind, closed at once
        except OSError:
            return True
    return False


def port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def process_alive(pid: int, binary: str) -> bool:
    """True if pid runs `binary` (guards against pid reuse): argv[0]'s file name is `binary`,
    or starts with `binary:` (slurmstepd names itself `slurmstepd: [job.step]`). `slurmd`
    does not match `slurmdbd`."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    first = os.path.basename(cmdline.split(b"\0", 1)[0].decode(errors="replace"))
    return first == binary or first.startswith(binary + ":")


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (field 3, the state, first); None if the
    process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()


def start_ticks(pid: int) -> int | None:
    """When pid started (clock ticks since boot, /proc/PID/stat field 22); None if it is gone.
    With the boot id it tells a recorded daemon from a later process given the same pid."""
    fields = _stat_fields(pid)
    return None if fields is None else int(fields[19])


def boot_id() -> str:
    """This boot's id (a pid recorded before a reboot names some other process now)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


class ProcessTable:
    """pids.json: the daemons this cluster started."""

    def __init__(self, paths: ClusterPaths) -> None:
        self.path = paths.pids_file

    def load(self) -> dict[str, dict[str, object]]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def record(self, name: str, pid: int, binary: str) -> None:
        data = self.load()
        data[name] = {"pid": pid, "binary": binary, "start": start_ticks(pid), "boot": boot_id()}
        self._write(data)

    def forget(self, name: str) -> None:
        data = self.load()
        data.pop(name, None)
        self._write(data)

    def _write(self, data: dict[str, dict[str, object]]) -> None:
        """Write the whole table at once (a crash mid-write leaves the old one whole)."""
        replace_whole(self.path, json.dumps(data, indent=1))

    def alive(self) -> dict[str, int]:
        """The recorded daemons still running: the same binary, and where recorded, the same
        boot and start time (not a later process that got the pid)."""
        out: dict[str, int] = {}
        boot = boot_id()
        for name, entry in self.load().items():
            pid, binary = entry.get("pid"), entry.get("binary")
            if not (isinstance(pid, int) and isinstance(binary, str)
                    and process_alive(pid, binary)):
                continue
            if entry.get("boot") not in (None, boot) or (
                    entry.get("start") is not None and entry.get("start") != start_ticks(pid)):
                continue
            out[name] = pid
        return out


@contextlib.contextmanager
def exclusive(lock_file: Path, timeout_s: float = 300.0) -> Iterator[None]:
    """Hold an exclusive lock on `lock_file` (flock) while the block runs, so that two `hase
    cluster up`/`down` at once do not both start a daemon (the second dies on the port and its
    pid replaces the first's in pids.json). Waits up to `timeout_s` for another holder."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with lock_file.open("a") as fh:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise ClusterError(
                        f"another 'hase cluster' command has held {lock_file} for over "
                        f"{timeout_s:g}s; wait for it to finish, then run this again") from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def start_service(
    runner: SubprocessRunner, table: ProcessTable, paths: ClusterPaths, service: Service,
    env: Mapping[str, str],
) -> int:
    """Start one daemon in its own session unless it already runs; return its pid."""
    running = table.alive()
    if service.name in running:
        return running[service.name]
    log_path = paths.log / f"{service.name}.out"
    pid = runner.spawn(list(service.argv), log_path=str(log_path), env=env)
    table.record(service.name, pid, service.binary)
    return pid


def wait_for(
    what: str, check: Callable[[], bool], timeout_s: float, log_hint: Path | None = None,
    still_running: Callable[[], bool] | None = None,
) -> None:
    """Poll check() until true; ClusterError with the log's tail on timeout or early death."""
    deadline = time.monotonic() + timeout_s
    outcome = f"did not become ready within {timeout_s:g}s"
    while time.monotonic() < deadline:
        if check():
            return
        if still_running is not None and not still_running():
            outcome = "exited before it was ready"  # not a timeout: a longer one will not help
            break
        time.sleep(0.25)
    tail = ""
    if log_hint is not None and log_hint.exists():
        lines = log_hint.read_text(errors="replace").splitlines()[-8:]
        tail = "\n  " + "\n  ".join(lines)
    raise ClusterError(f"{what} {outcome} (log {log_hint}){tail}")


def pid_running(pid: int) -> bool:
    """True while pid exists and is not a zombie (binary not checked: it may not have exec'd yet)."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def stop_pid(pid: int, binary: str, timeout_s: float = 15.0) -> None:
    """SIGTERM, then SIGKILL after timeout; only if the pid is still the binary we started."""
    if not process_alive(pid, binary):
        return
    try:
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not process_alive(pid, binary):
            _reap(pid)
            return
        _reap(pid)
        time.sleep(0.1)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _reap(pid)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def stray_stepds(slurm_conf: Path) -> list[int]:
    """slurmstepd processes started for this cluster (their environment names our SLURM_CONF)."""
    marker = f"SLURM_CONF={slurm_conf}".encode()
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if b"slurmstepd" not in (entry / "cmdline").read_bytes():
                continue
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found
