"""MPS prolog/epilog against the fake control binary: which jobs get a daemon, where its
directories may live, stale directories, and stopping a daemon that is slow or hung."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.unit.test_mps_scripts import _alive, _calls, _run, _scripts, _stopped, daemons, node

__all__ = ["node"]  # the fixture, used by name

NOBODY = 65534


def test_no_gpu_no_daemon_and_no_drain(node: dict[str, Path]) -> None:
    """--hase-mps without a GPU: nothing to share; even a node without the control binary
    must not be drained by such a job."""
    scripts = _scripts(node, on_failure="drain")
    proc = _run(scripts["prolog"], node, path="/usr/bin:/bin", SLURM_HASE_MPS="50",
                CUDA_VISIBLE_DEVICES="")
    assert proc.returncode == 0, proc.stderr
    assert "no GPU allocated" in proc.stderr and "nothing to share" in proc.stderr
    assert _calls(node) == [] and not node["pipe"].exists()


def test_slurm_job_gpus_limits_the_daemon(node: dict[str, Path]) -> None:
    """Without CUDA_VISIBLE_DEVICES the daemon still sees only the job's GPUs."""
    scripts = _scripts(node)
    proc = _run(scripts["prolog"], node, SLURM_HASE_MPS="50", CUDA_VISIBLE_DEVICES="",
                SLURM_JOB_GPUS="2,3")
    assert proc.returncode == 0, proc.stderr
    assert _calls(node)[0].startswith("args=[-d] ") and _calls(node)[0].endswith(" gpus=[2,3]")


def test_prolog_makes_root_only_directories(node: dict[str, Path]) -> None:
    scripts = _scripts(node)
    assert _run(scripts["prolog"], node, SLURM_HASE_MPS="50").returncode == 0
    for path in (node["pipe"], node["log"], node["pipe"] / "4242", node["log"] / "4242"):
        st = path.stat()
        assert (st.st_uid, st.st_mode & 0o777) == (os.geteuid(), 0o755), path


@pytest.mark.parametrize("which", ["pipe", "log"])
@pytest.mark.parametrize(("problem", "message"), [
    ("group-writable", "has mode 775: group or others can write to it; chmod go-w"),
    ("world-writable", "has mode 1777: group or others can write to it"),
    ("symlink", "is a symlink: refusing to use it"),
    ("other owner", f"is owned by uid {NOBODY}, not uid 0"),
])
def test_prolog_refuses_unsafe_base(node: dict[str, Path], which: str, problem: str,
                                    message: str) -> None:
    base = node[which]
    if problem == "symlink":
        (node["root"] / "elsewhere").mkdir(mode=0o755)
        base.symlink_to(node["root"] / "elsewhere")
    else:
        base.mkdir()
        base.chmod({"group-writable": 0o775, "world-writable": 0o1777}.get(problem, 0o755))
    if problem == "other owner":
        if os.geteuid() != 0:
            pytest.skip("chown to another user needs root")
        os.chown(base, NOBODY, NOBODY)
    scripts = _scripts(node)
    proc = _run(scripts["prolog"], node, SLURM_HASE_MPS="50")
    assert proc.returncode == 1, proc.stderr
    assert f"ERROR: {base} {message}" in proc.stderr
    assert _calls(node) == []  # no daemon started


@pytest.mark.parametrize("stale", ["dir", "symlink"])
def test_stale_pipe_dir_does_not_pass_for_the_new_daemon(node: dict[str, Path], stale: str) -> None:
    """A crashed daemon of the same job id left control behind: it is removed first, so a new
    daemon that never opens its pipe is noticed."""
    node["pipe"].mkdir(mode=0o755)
    victim = node["root"] / "victim"
    victim.mkdir()
    (victim / "keep").write_text("")
    old = node["pipe"] / "4242"
    if stale == "dir":
        old.mkdir()
        (old / "control").write_text("")
    else:
        old.symlink_to(victim)
    scripts = _scripts(node)
    proc = _run(scripts["prolog"], node, SLURM_HASE_MPS="50", FAKE_MPS_NO_PIPE="1")
    assert proc.returncode == 1 and "did not open" in proc.stderr, proc.stderr
    assert "removing stale" in proc.stderr
    assert (victim / "keep").exists()  # a link is removed, not followed
    assert _stopped(node)


def test_stale_pipe_dir_replaced_by_a_fresh_one(node: dict[str, Path]) -> None:
    (node["pipe"] / "4242").mkdir(parents=True)
    (node["pipe"] / "4242" / "junk").write_text("")
    scripts = _scripts(node)
    proc = _run(scripts["prolog"], node, SLURM_HASE_MPS="50")
    assert proc.returncode == 0, proc.stderr
    assert not (node["pipe"] / "4242" / "junk").exists()
    assert (node["pipe"] / "4242" / "control").exists()


def test_kept_logs_of_a_requeued_job_are_reused(node: dict[str, Path]) -> None:
    (node["log"] / "4242").mkdir(parents=True)
    (node["log"] / "4242" / "control.log").write_text("first run\n")
    scripts = _scripts(node)
    assert _run(scripts["prolog"], node, SLURM_HASE_MPS="50").returncode == 0
    assert (node["log"] / "4242" / "control.log").read_text() == "first run\n"


def test_job_log_dir_symlink_refused(node: dict[str, Path]) -> None:
    node["log"].mkdir()
    (node["log"] / "4242").symlink_to(node["root"])
    scripts = _scripts(node)
    proc = _run(scripts["prolog"], node, SLURM_HASE_MPS="50")
    assert proc.returncode == 1 and "4242 is a symlink" in proc.stderr
    assert _calls(node) == [] and not (node["pipe"] / "4242").exists()  # its pipe dir removed


def test_prolog_rejects_non_numeric_uid(node: dict[str, Path]) -> None:
    scripts = _scripts(node)
    proc = _run(scripts["prolog"], node, SLURM_HASE_MPS="50", SLURM_JOB_UID="0 -x")
    assert proc.returncode == 1 and "SLURM_JOB_UID is not numeric ('0 -x')" in proc.stderr


def test_epilog_waits_for_the_daemon_to_exit(node: dict[str, Path]) -> None:
    """quit returns before the daemon is gone: the pipe directory stays until it is."""
    scripts = _scripts(node)
    assert _run(scripts["prolog"], node, SLURM_HASE_MPS="50").returncode == 0
    proc = _run(scripts["epilog"], node, FAKE_MPS_QUIT_DELAY="0.5")
    assert proc.returncode == 0, proc.stderr
    (pid,) = daemons(node["daemons"])
    assert node["daemon_log"].is_file(), "the epilog returned before the daemon exited"
    assert node["daemon_log"].read_text() == f"daemon {pid} quit, pipe dir present\n"
    assert _stopped(node) and "SIGKILL" not in proc.stderr


def test_epilog_of_a_daemon_already_gone_does_not_drain(node: dict[str, Path]) -> None:
    """The daemon died before the epilog (killed with the job's processes, or crashed): quit
    fails as nvidia-cuda-mps-control does, but nothing runs, so the epilog succeeds and the
    pipe directory is removed (seen once on the live test's slurmd: the node was drained)."""
    scripts = _scripts(node)
    assert _run(scripts["prolog"], node, SLURM_HASE_MPS="50").returncode == 0
    (pid,) = daemons(node["daemons"])
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _alive(pid):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # the fake's quit would still signal the unreaped zombie: make it fail, as the real
    # control binary does when its daemon is gone
    proc = _run(scripts["epilog"], node, FAKE_MPS_FAIL="quit")
    assert proc.returncode == 0, proc.stderr
    assert "quit: fake failure; no MPS process" in proc.stderr
    assert "nothing to stop" in proc.stderr and _stopped(node)


def test_epilog_kills_a_hung_daemon(node: dict[str, Path]) -> None:
    scripts = _scripts(node)
    assert _run(scripts["prolog"], node, SLURM_HASE_MPS="50").returncode == 0
    (pid,) = daemons(node["daemons"])
    proc = _run(scripts["epilog"], node, FAKE_MPS_IGNORE_QUIT="1")
    assert proc.returncode == 0, proc.stderr
    assert "still run 1s after quit: sending SIGKILL" in proc.stderr and str(pid) in proc.stderr
    assert not _alive(pid) and _stopped(node)


def test_epilog_without_pipe_dir_kills_nothing(node: dict[str, Path]) -> None:
    scripts = _scripts(node)
    assert _run(scripts["prolog"], node, SLURM_HASE_MPS="50").returncode == 0
    proc = _run(scripts["epilog"], node, SLURM_JOB_ID="4243")  # another job
    assert proc.returncode == 0 and "nothing to do" in proc.stderr
    assert all(_alive(p) for p in daemons(node["daemons"]))


@pytest.mark.parametrize("mode", [0o700, 0o750])
def test_prolog_refuses_a_pipe_base_the_job_cannot_enter(node: dict[str, Path], mode: int) -> None:
    """A root-only pipe base passed the safety checks: the daemon started, but the job's tasks
    (its user) could not reach it, and the plugin (checking as that user) took it for missing."""
    node["pipe"].mkdir(mode=mode)
    node["pipe"].chmod(mode)
    scripts = _scripts(node)
    proc = _run(scripts["prolog"], node, SLURM_HASE_MPS="50")
    assert proc.returncode == 1, proc.stderr
    assert (f"ERROR: {node['pipe']} has mode {mode:o}: the job's tasks (uid 1234) cannot enter it"
            in proc.stderr)
    assert _calls(node) == []  # no daemon started


def test_prolog_accepts_a_pipe_base_others_can_only_enter(node: dict[str, Path]) -> None:
    node["pipe"].mkdir()
    node["pipe"].chmod(0o711)
    scripts = _scripts(node)
    proc = _run(scripts["prolog"], node, SLURM_HASE_MPS="50")
    assert proc.returncode == 0, proc.stderr
    assert _calls(node)[0].startswith("args=[-d] ")
