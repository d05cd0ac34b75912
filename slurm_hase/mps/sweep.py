"""Find and stop MPS daemons left behind by jobs that no longer run on this node.

The epilog stops a job's daemon when the job ends. When it did not run or did not finish
(slurmd killed or restarted mid-epilog, an epilog timeout, a node that came back without a
reboot), the daemon keeps holding its GPU and the job's pipe directory stays. The sweep lists
what this node holds under the pipe base (directories and processes started with a pipe
directory there), asks Slurm which jobs still run here, and runs the rendered epilog for every
other job id, exactly as slurmd would have.
"""

from __future__ import annotations

import difflib
import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from slurm_hase.errors import ConfigError
from slurm_hase.mps.render import PLUGSTACK_FILE
from slurm_hase.slurm.backend import SlurmBackend
from slurm_hase.slurm.hostlist import expand
from slurm_hase.slurm.runner import Runner
from slurm_hase.slurm.types import Job, JobState

EPILOG_FILE = "hase-mps-epilog.sh"
# the environment variable that makes the epilog reap a job's processes although its pipe
# directory is gone (templates/mps-epilog.sh.j2)
SWEEP_ENV = "HASE_MPS_SWEEP"
JOB_ID = re.compile(r"[0-9]+")
# states in which a job's prolog may have run and its epilog has not finished: its daemon is
# not left over. OTHER (SIGNALING, STAGE_OUT, ...) counts too: never stop what may still be used
LIVE_STATES = frozenset({JobState.RUNNING, JobState.SUSPENDED, JobState.COMPLETING,
                         JobState.OTHER})
# the epilog waits up to start_timeout_s (at most 600) for quit, then for the processes
EPILOG_TIMEOUT_S = 2 * 600 + 60
PIPE_ENV = b"CUDA_MPS_PIPE_DIRECTORY="


@dataclass(frozen=True)
class SweepSetup:
    """Where a node's rendered scripts keep their daemons, and the epilog that stops one."""

    pipe_base: Path
    epilog: Path


@dataclass(frozen=True)
class Leftover:
    """What this node holds for one job id: its pipe directory (None if gone) and processes."""

    job_id: str
    directory: Path | None = None
    stamp: tuple[int, int] | None = None  # the directory's (inode, mtime in ns) when listed
    pids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Outcome:
    """What the sweep did with one job id's leftovers, and why."""

    job_id: str
    action: str  # "kept", "would-stop", "stopped" or "failed"
    reason: str
    directory: str | None = None
    pids: tuple[int, ...] = ()

    def as_dict(self) -> dict[str, object]:
        return {"job_id": self.job_id, "action": self.action, "reason": self.reason,
                "directory": self.directory, "pids": list(self.pids)}


@dataclass
class SweepReport:
    """Every job id found under the pipe base, with what was done."""

    node: str
    pipe_base: str
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(o.action == "failed" for o in self.outcomes)

    def as_dict(self) -> dict[str, object]:
        return {"node": self.node, "pipe_base": self.pipe_base,
                "outcomes": [o.as_dict() for o in self.outcomes]}


def read_setup(scripts_dir: Path) -> SweepSetup:
    """The pipe base and epilog that `hase gpu mps render --out scripts_dir` wrote."""
    conf = scripts_dir / PLUGSTACK_FILE
    try:
        text = conf.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {conf} ({exc.strerror or exc}): name the directory "
                          "that `hase gpu mps render --out` wrote") from None
    pipe_base = None
    for line in text.splitlines():
        words = line.split()
        if words and words[0] in ("required", "optional"):
            for word in words[2:]:
                if word.startswith("pipe_dir="):
                    pipe_base = word.removeprefix("pipe_dir=")
    if not pipe_base or not pipe_base.startswith("/"):
        raise ConfigError(f"{conf} has no plugin line with an absolute pipe_dir=; "
                          "re-render it with `hase gpu mps render`")
    epilog = scripts_dir / EPILOG_FILE
    if not epilog.is_file() or not os.access(epilog, os.X_OK):
        raise ConfigError(f"{epilog} is missing or not executable; re-render it with "
                          "`hase gpu mps render`")
    return SweepSetup(Path(pipe_base), epilog)


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.lstat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


def _process_jobs(pipe_base: Path, proc_root: Path) -> dict[str, list[int]]:
    """Job id -> PIDs of the processes started with a pipe directory pipe_base/<job id>."""
    found: dict[str, list[int]] = {}
    try:
        entries = list(os.scandir(proc_root))
    except OSError:
        return found
    prefix = PIPE_ENV + os.fsencode(str(pipe_base)) + b"/"
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            environ = Path(entry.path, "environ").read_bytes()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        for var in environ.split(b"\0"):
            if var.startswith(prefix):
                name = var[len(prefix):].decode("ascii", "replace")
                if JOB_ID.fullmatch(name):
                    found.setdefault(name, []).append(int(entry.name))
    return found


def find_leftovers(pipe_base: Path, proc_root: Path = Path("/proc")) -> list[Leftover]:
    """Every job id with a directory or a process under pipe_base, by job id."""
    dirs: dict[str, Path] = {}
    try:
        for entry in os.scandir(pipe_base):
            if JOB_ID.fullmatch(entry.name):
                dirs[entry.name] = Path(entry.path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise ConfigError(f"cannot list {pipe_base}: {exc.strerror or exc}") from None
    procs = _process_jobs(pipe_base, proc_root)
    return [Leftover(job_id, dirs.get(job_id), _stamp(dirs[job_id]) if job_id in dirs else None,
                     tuple(sorted(procs.get(job_id, ()))))
            for job_id in sorted(set(dirs) | set(procs), key=int)]


def live_here(jobs: Iterable[Job], node: str) -> set[str]:
    """Ids of the jobs whose daemon may still be in use on `node`: in a live state there, or in
    a live state with no node list (where they run cannot be told)."""
    live: set[str] = set()
    for job in jobs:
        if job.state not in LIVE_STATES:
            continue
        try:
            names = expand(job.nodes) if job.nodes else []
        except ValueError:
            names = []
        if not names or node in names:
            live.add(job.job_id)
    return live


def check_node(node: str, names: list[str]) -> None:
    """Refuse a node name Slurm does not know: every job would seem to run elsewhere, and
    every daemon of the node would be stopped."""
    if node in names:
        return
    close = difflib.get_close_matches(node, names, n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise ConfigError(f"node {node!r} is not a node of this Slurm cluster{hint} (give this "
                      "node's NodeName with --node)")


def judge(leftover: Leftover, live: set[str], now_s: float, min_age_s: float) -> str | None:
    """Why `leftover` must be kept, or None when it is left over."""
    if leftover.job_id in live:
        return "the job still runs on this node"
    if leftover.stamp is not None and now_s - leftover.stamp[1] / 1e9 < min_age_s:
        return f"its directory is younger than {min_age_s:g}s (a prolog may be starting it)"
    return None


def sweep(setup: SweepSetup, node: str, backend: SlurmBackend, runner: Runner, *,
          min_age_s: float = 600.0, dry_run: bool = False,
          clock: Callable[[], float] = time.time, proc_root: Path = Path("/proc"),
          on_outcome: Callable[[Outcome], None] | None = None) -> SweepReport:
    """Stop the daemons of job ids that no longer run on `node`. Leftovers are listed before
    Slurm is asked, so a job that starts meanwhile is either live or not yet listed. A node
    Slurm does not know is refused (ConfigError), and a Slurm error propagates: either way
    nothing is stopped."""
    report = SweepReport(node, str(setup.pipe_base))
    check_node(node, [n.name for n in backend.nodes()])
    leftovers = find_leftovers(setup.pipe_base, proc_root)
    if not leftovers:
        return report
    live = live_here(backend.jobs(), node)
    for leftover in leftovers:
        outcome = _handle(leftover, setup, live, runner, clock(), min_age_s, dry_run, proc_root)
        report.outcomes.append(outcome)
        if on_outcome is not None:
            on_outcome(outcome)
    return report


def _handle(leftover: Leftover, setup: SweepSetup, live: set[str], runner: Runner, now_s: float,
            min_age_s: float, dry_run: bool, proc_root: Path) -> Outcome:
    directory = str(leftover.directory) if leftover.directory else None

    def outcome(action: str, reason: str, pids: tuple[int, ...] = leftover.pids) -> Outcome:
        return Outcome(leftover.job_id, action, reason, directory, pids)

    why_kept = judge(leftover, live, now_s, min_age_s)
    if why_kept:
        return outcome("kept", why_kept)
    gone = "the job no longer runs on this node"
    if dry_run:
        return outcome("would-stop", gone)
    path = setup.pipe_base / leftover.job_id
    if _stamp(path) != leftover.stamp:  # made anew (a requeued run's prolog) since listed
        return outcome("kept", "its directory changed since it was listed (a new run of the job)")
    result = runner.run([str(setup.epilog)], env={"SLURM_JOB_ID": leftover.job_id, SWEEP_ENV: "1"},
                        timeout_s=EPILOG_TIMEOUT_S)
    left = tuple(sorted(_process_jobs(setup.pipe_base, proc_root).get(leftover.job_id, ())))
    errors = [line for line in result.stderr.splitlines() if "ERROR:" in line]
    if result.returncode != 0 or left or path.exists() or path.is_symlink() or errors:
        detail = errors[-1] if errors else f"epilog exited {result.returncode}"
        if left:
            detail += f"; processes {', '.join(map(str, left))} still run"
        return outcome("failed", detail, left)
    return outcome("stopped", f"{gone}; its epilog stopped it")

