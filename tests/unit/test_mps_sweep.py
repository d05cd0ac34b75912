"""`hase gpu mps sweep`: daemons of jobs that no longer run on the node are stopped through the
rendered epilog, against the fake control binary; live jobs, young directories and a node or
Slurm that cannot be trusted stop nothing."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from slurm_hase.errors import ConfigError, SlurmUnavailableError
from slurm_hase.mps.sweep import (
    Leftover,
    SweepSetup,
    find_leftovers,
    live_here,
    read_setup,
    sweep,
)
from slurm_hase.slurm.runner import SubprocessRunner
from slurm_hase.slurm.types import Job, JobState, Node
from tests.conftest import run_main
from tests.unit.test_mps_scripts import _alive, _run, _scripts, daemons, node

__all__ = ["node"]  # the fixture, used by name

HERE = "a100-1"


class Slurm:
    """The two things the sweep asks Slurm: the queue and the node names."""

    def __init__(self, jobs: list[Job], down: bool = False) -> None:
        self._jobs = jobs
        self.down = down
        self.asked = 0

    def jobs(self) -> list[Job]:
        self.asked += 1
        if self.down:
            raise SlurmUnavailableError(["squeue", "--json"], 1,
                                        "slurm_load_jobs error: Unable to contact slurm controller")
        return self._jobs

    def nodes(self) -> list[Node]:
        if self.down:
            raise SlurmUnavailableError(["scontrol", "show", "node"], 1, "Unable to contact")
        return [Node(name=n, state="MIXED") for n in (HERE, "a100-2", "v100-1")]


def job(job_id: str, state: JobState = JobState.RUNNING, nodes: str = HERE) -> Job:
    return Job(job_id=job_id, name="train", user="alice", account="teama", partition="gpu",
               state=state, nodes=nodes)


def _start(node: dict[str, Path], scripts: dict[str, Path], *job_ids: str) -> dict[str, int]:
    """Start each job's fake MPS daemon through the prolog; job id -> daemon PID."""
    pids = {}
    for job_id in job_ids:
        before = set(daemons(node["daemons"]))
        proc = _run(scripts["prolog"], node, SLURM_JOB_ID=job_id, SLURM_HASE_MPS="50")
        assert proc.returncode == 0, proc.stderr
        (pid,) = set(daemons(node["daemons"])) - before
        pids[job_id] = pid
    return pids


def _runner(node: dict[str, Path], path: str | None = None) -> SubprocessRunner:
    return SubprocessRunner({
        "PATH": path if path is not None else f"{node['bin']}:/usr/bin:/bin",
        "FAKE_MPS_RECORD": str(node["record"]), "FAKE_MPS_DAEMONS": str(node["daemons"]),
        "FAKE_MPS_DAEMON_LOG": str(node["daemon_log"])})


def _setup(node: dict[str, Path], scripts: dict[str, Path]) -> SweepSetup:
    setup = read_setup(scripts["epilog"].parent)
    assert setup == SweepSetup(node["pipe"], scripts["epilog"])
    return setup


def test_stops_only_the_daemons_of_jobs_gone_from_the_node(node: dict[str, Path]) -> None:
    """4242 runs here; 4343 ended; 4444 now runs on another node; 4545 is unknown to Slurm
    (purged): the last three are stopped, 4242 is kept and still served."""
    scripts = _scripts(node)
    pids = _start(node, scripts, "4242", "4343", "4444", "4545")
    slurm = Slurm([job("4242"), job("4343", JobState.COMPLETED),
                   job("4444", nodes="a100-2")])
    report = sweep(_setup(node, scripts), HERE, slurm, _runner(node), min_age_s=0)
    actions = {o.job_id: o.action for o in report.outcomes}
    assert actions == {"4242": "kept", "4343": "stopped", "4444": "stopped", "4545": "stopped"}
    assert not report.failed
    assert _alive(pids["4242"]) and (node["pipe"] / "4242" / "control").exists()
    for gone in ("4343", "4444", "4545"):
        assert not _alive(pids[gone]) and not (node["pipe"] / gone).exists(), gone
    kept = next(o for o in report.outcomes if o.job_id == "4242")
    # the daemon and its children (the fake's sleep; a real one's MPS servers) share its env
    assert kept.reason == "the job still runs on this node" and pids["4242"] in kept.pids
    assert "sweep: job 4343 no longer runs on this node" in (node["root"] / "hase-mps.log").read_text()


def test_dry_run_stops_nothing(node: dict[str, Path]) -> None:
    scripts = _scripts(node)
    pids = _start(node, scripts, "4343")
    report = sweep(_setup(node, scripts), HERE, Slurm([]), _runner(node), min_age_s=0,
                   dry_run=True)
    assert [(o.job_id, o.action) for o in report.outcomes] == [("4343", "would-stop")]
    assert _alive(pids["4343"]) and (node["pipe"] / "4343").exists()


def test_a_young_directory_is_kept(node: dict[str, Path]) -> None:
    """A directory made under --min-age ago may be a prolog starting its job right now."""
    scripts = _scripts(node)
    pids = _start(node, scripts, "4343")
    report = sweep(_setup(node, scripts), HERE, Slurm([]), _runner(node), min_age_s=3600)
    (outcome,) = report.outcomes
    assert outcome.action == "kept" and "younger than 3600s" in outcome.reason
    assert _alive(pids["4343"])
    old = 10**9  # backdate it: now old enough
    os.utime(node["pipe"] / "4343", (old, old))
    report = sweep(_setup(node, scripts), HERE, Slurm([]), _runner(node), min_age_s=3600)
    assert [o.action for o in report.outcomes] == ["stopped"] and not _alive(pids["4343"])


@pytest.mark.parametrize("state", [JobState.RUNNING, JobState.COMPLETING, JobState.SUSPENDED,
                                   JobState.OTHER])
def test_live_states_keep_the_daemon(state: JobState) -> None:
    assert live_here([job("7", state)], HERE) == {"7"}
    assert live_here([job("7", state, nodes="a100-[1-2]")], HERE) == {"7"}
    assert live_here([job("7", state, nodes="a100-2,v100-1")], HERE) == set()
    assert live_here([job("7", state, nodes="")], HERE) == {"7"}  # where it runs is unknown


@pytest.mark.parametrize("state", [JobState.PENDING, JobState.COMPLETED, JobState.CANCELLED,
                                   JobState.FAILED, JobState.NODE_FAIL, JobState.TIMEOUT])
def test_ended_or_requeued_jobs_are_not_live(state: JobState) -> None:
    assert live_here([job("7", state)], HERE) == set()


def test_unknown_node_stops_nothing(node: dict[str, Path]) -> None:
    """A host name that is not the NodeName would make every job seem to run elsewhere."""
    scripts = _scripts(node)
    pids = _start(node, scripts, "4242")
    slurm = Slurm([job("4242")])
    with pytest.raises(ConfigError, match=r"node 'a100-01' is not a node of this Slurm cluster; "
                                          r"did you mean a100-1"):
        sweep(_setup(node, scripts), "a100-01", slurm, _runner(node), min_age_s=0)
    assert slurm.asked == 0 and _alive(pids["4242"])


def test_slurm_down_stops_nothing(node: dict[str, Path]) -> None:
    scripts = _scripts(node)
    pids = _start(node, scripts, "4343")
    with pytest.raises(SlurmUnavailableError):
        sweep(_setup(node, scripts), HERE, Slurm([], down=True), _runner(node), min_age_s=0)
    assert _alive(pids["4343"]) and (node["pipe"] / "4343").exists()


def test_daemon_whose_directory_is_gone_is_reaped(node: dict[str, Path]) -> None:
    """Someone removed the pipe directory; the daemon, found by its environment, still goes.
    slurmd's own epilog (no HASE_MPS_SWEEP) leaves such a job alone, as before."""
    scripts = _scripts(node)
    pids = _start(node, scripts, "4343")
    shutil.rmtree(node["pipe"] / "4343")
    proc = _run(scripts["epilog"], node, SLURM_JOB_ID="4343")
    assert "nothing to do" in proc.stderr and _alive(pids["4343"])
    (left,) = find_leftovers(node["pipe"])
    assert (left.job_id, left.directory, left.stamp) == ("4343", None, None)
    assert pids["4343"] in left.pids
    report = sweep(_setup(node, scripts), HERE, Slurm([]), _runner(node), min_age_s=0)
    assert [o.action for o in report.outcomes] == ["stopped"]
    assert not _alive(pids["4343"])
    assert "sending SIGKILL" in (node["root"] / "hase-mps.log").read_text()  # no pipe: no quit


def test_a_directory_made_anew_is_kept(node: dict[str, Path]) -> None:
    """Between listing and stopping, a requeued run of the job made its directory anew."""
    scripts = _scripts(node)
    pids = _start(node, scripts, "4343")
    from slurm_hase.mps.sweep import _handle

    stale = Leftover("4343", node["pipe"] / "4343", (1, 1), (pids["4343"],))
    outcome = _handle(stale, _setup(node, scripts), set(), _runner(node), 10**10, 0, False,
                      Path("/proc"))
    assert outcome.action == "kept" and "changed since it was listed" in outcome.reason
    assert _alive(pids["4343"])


def test_epilog_failure_is_reported(node: dict[str, Path]) -> None:
    """No control binary on PATH: the epilog cannot send quit (its ERROR line is the reason),
    still kills the daemon and removes the directory, and the sweep says it failed."""
    scripts = _scripts(node)
    pids = _start(node, scripts, "4343")
    report = sweep(_setup(node, scripts), HERE, Slurm([]), _runner(node, path="/usr/bin:/bin"),
                   min_age_s=0)
    (outcome,) = report.outcomes
    assert report.failed and outcome.action == "failed"
    assert "nvidia-cuda-mps-control not found" in outcome.reason
    assert not _alive(pids["4343"]) and not (node["pipe"] / "4343").exists()


def test_only_job_ids_under_this_pipe_base(node: dict[str, Path], tmp_path: Path) -> None:
    """Other names in the base, and daemons of another base, are not this sweep's."""
    scripts = _scripts(node)
    _start(node, scripts, "4343")
    (node["pipe"] / "lost+found").mkdir()
    (node["pipe"] / "12_3").mkdir()
    other = _scripts({**node, "pipe": tmp_path / "pipe2", "root": tmp_path / "other"})
    (tmp_path / "other").mkdir(exist_ok=True)
    _start(node, other, "5000")
    assert [left.job_id for left in find_leftovers(node["pipe"])] == ["4343"]
    assert find_leftovers(tmp_path / "absent") == []


def test_nothing_to_sweep_asks_no_queue(node: dict[str, Path]) -> None:
    scripts = _scripts(node)
    slurm = Slurm([])
    report = sweep(_setup(node, scripts), HERE, slurm, _runner(node), min_age_s=0)
    assert report.outcomes == [] and slurm.asked == 0


def test_scripts_dir_errors(tmp_path: Path, node: dict[str, Path]) -> None:
    with pytest.raises(ConfigError, match=r"cannot read .*hase-mps-plugstack.conf .*render --out"):
        read_setup(tmp_path / "nowhere")
    scripts = _scripts(node)
    conf = scripts["plugstack"]
    conf.write_text("# hand-edited\nrequired /usr/lib/hase_mps.so log_dir=/var/log/x\n")
    with pytest.raises(ConfigError, match="no plugin line with an absolute pipe_dir="):
        read_setup(conf.parent)
    scripts = _scripts(node)
    scripts["epilog"].chmod(0o644)
    with pytest.raises(ConfigError, match="hase-mps-epilog.sh is missing or not executable"):
        read_setup(conf.parent)


def test_cli_names_the_missing_scripts(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = run_main(["gpu", "mps", "sweep", "--scripts", str(tmp_path / "nowhere")],
                               capsys)
    assert code == 2
    assert "hase-mps-plugstack.conf" in err and "render --out" in err
