"""MPS prolog/epilog: render, bash -n, and run them against a fake nvidia-cuda-mps-control."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_hase.errors import ConfigError
from slurm_hase.mps.render import MpsConfig, MpsConfigError, plugstack_line, render, write_scripts

FAKE_MPS = r"""#!/bin/bash
# fake nvidia-cuda-mps-control: records argv, stdin, dirs and GPUs, one line per call; -d starts
# fake-mps-daemon, quit sends it SIGTERM (it exits asynchronously, like the real one)
stdin=""
if [ "$#" -eq 0 ]; then stdin=$(cat); fi
echo "args=[$*] stdin=[$stdin] pipe=[$CUDA_MPS_PIPE_DIRECTORY] log=[$CUDA_MPS_LOG_DIRECTORY] gpus=[${CUDA_VISIBLE_DEVICES:-}]" >>"$FAKE_MPS_RECORD"
if [ "$1" = "-d" ]; then
    echo "order=[${CUDA_DEVICE_ORDER:-}] share=[${CUDA_MPS_ACTIVE_THREAD_PERCENTAGE:-}]" >>"$FAKE_MPS_RECORD.env"
fi
if [ -n "${FAKE_MPS_FAIL:-}" ] && [[ "$* $stdin" == *"$FAKE_MPS_FAIL"* ]]; then
    echo "fake failure" >&2; exit 3
fi
if [ "$1" = "-d" ]; then
    nohup "$(dirname "$0")/fake-mps-daemon" </dev/null >/dev/null 2>&1 &
    exit 0
fi
if [ "$stdin" = "quit" ] && [ -z "${FAKE_MPS_IGNORE_QUIT:-}" ]; then
    pid=$(cat "$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid" 2>/dev/null) \
        && kill -TERM "$pid" 2>/dev/null || { echo "Cannot find MPS control daemon process" >&2; exit 1; }
fi
exit 0
"""

FAKE_DAEMON = r"""#!/bin/bash
# fake MPS control daemon: pid file and control pipe in its pipe dir; on SIGTERM it waits
# FAKE_MPS_QUIT_DELAY, logs whether its pipe dir was still there, and exits; gone after 60 s
dir="$CUDA_MPS_PIPE_DIRECTORY"
echo "$$" >>"$FAKE_MPS_DAEMONS"
stop() {
    sleep "${FAKE_MPS_QUIT_DELAY:-0}"
    if [ -d "$dir" ]; then state=present; else state=removed; fi
    echo "daemon $$ quit, pipe dir $state" >>"$FAKE_MPS_DAEMON_LOG"
    exit 0
}
trap stop TERM
echo "$$" >"$dir/nvidia-cuda-mps-control.pid"
if [ -z "${FAKE_MPS_NO_PIPE:-}" ]; then : >"$dir/control"; fi
for _ in $(seq 600); do sleep 0.1; done
"""


def _alive(pid: int) -> bool:
    """A running (not zombie) process."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


@pytest.fixture()
def node(tmp_path: Path) -> Iterator[dict[str, Path]]:
    """A node: a bin dir with the fake control binary and daemon, pipe/log bases, records.
    Fake daemons still running at the end are killed."""
    bindir = tmp_path / "bin dir"  # a space, to catch unquoted paths
    bindir.mkdir()
    for name, text in (("nvidia-cuda-mps-control", FAKE_MPS), ("fake-mps-daemon", FAKE_DAEMON)):
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    yield {"bin": bindir, "pipe": tmp_path / "pipe", "log": tmp_path / "log",
           "record": tmp_path / "record.txt", "daemons": tmp_path / "daemons.txt",
           "daemon_log": tmp_path / "daemon-log.txt", "root": tmp_path}
    for pid in daemons(tmp_path / "daemons.txt"):
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def daemons(record: Path) -> list[int]:
    """PIDs of the fake daemons started so far."""
    return [int(x) for x in record.read_text().split()] if record.exists() else []


def _scripts(node: dict[str, Path], **kw: object) -> dict[str, Path]:
    cfg = MpsConfig(pipe_dir=str(node["pipe"]), log_dir=str(node["log"]), syslog=False,
                    log_file=str(node["root"] / "hase-mps.log"), start_timeout_s=1, **kw)  # type: ignore[arg-type]
    return write_scripts(cfg, node["root"] / "out")


def _run(script: Path, node: dict[str, Path], path: str | None = None,
         **env: str) -> subprocess.CompletedProcess[str]:
    full = {"PATH": path if path is not None else f"{node['bin']}:/usr/bin:/bin",
            "FAKE_MPS_RECORD": str(node["record"]), "FAKE_MPS_DAEMONS": str(node["daemons"]),
            "FAKE_MPS_DAEMON_LOG": str(node["daemon_log"]), "SLURM_JOB_ID": "4242",
            "SLURM_JOB_UID": "1234", "CUDA_VISIBLE_DEVICES": "0", **env}
    return subprocess.run(["/bin/bash", str(script)], env=full, capture_output=True, text=True,
                          check=False, timeout=30)


def _calls(node: dict[str, Path]) -> list[str]:
    rec = node["record"]
    return rec.read_text().splitlines() if rec.exists() else []


def _daemon_env(node: dict[str, Path]) -> list[str]:
    """CUDA_DEVICE_ORDER and CUDA_MPS_ACTIVE_THREAD_PERCENTAGE of each `-d` call."""
    rec = Path(f"{node['record']}.env")
    return rec.read_text().splitlines() if rec.exists() else []


def _stopped(node: dict[str, Path]) -> bool:
    """Every fake daemon has exited and the job's pipe directory is gone."""
    pids = daemons(node["daemons"])
    return bool(pids) and not any(_alive(p) for p in pids) and not (node["pipe"] / "4242").exists()


@pytest.mark.parametrize("kind", ["prolog", "epilog"])
@pytest.mark.parametrize("policy", ["drain", "ignore"])
def test_rendered_scripts_pass_bash_n(tmp_path: Path, kind: str, policy: str) -> None:
    script = tmp_path / "s.sh"
    script.write_text(render(kind, MpsConfig(on_failure=policy, log_file="/var/log/x y.log")))
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    text = script.read_text()
    assert f"ON_FAILURE={policy}\n" in text
    assert "LOG_FILE='/var/log/x y.log'" in text


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="needs shellcheck")
@pytest.mark.parametrize("kind", ["prolog", "epilog"])
def test_rendered_scripts_pass_shellcheck(tmp_path: Path, kind: str) -> None:
    script = tmp_path / "s.sh"
    script.write_text(render(kind, MpsConfig(log_file="/var/log/x.log")))
    proc = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout


def test_prolog_and_epilog_share_the_stop_code() -> None:
    """The daemon-stopping functions come from one template (mps-stop.sh.j2), included by both
    scripts: the rendered blocks are the same."""
    texts = [render(kind, MpsConfig()) for kind in ("prolog", "epilog")]
    blocks = [t[t.index("# ---- shared by"):t.index("# ---- end shared ----")] for t in texts]
    assert blocks[0] == blocks[1] and "stop_daemon()" in blocks[0]


def test_write_scripts_executable(node: dict[str, Path]) -> None:
    paths = _scripts(node)
    assert sorted(paths) == ["epilog", "plugstack", "prolog"]
    for kind in ("prolog", "epilog"):
        assert os.access(paths[kind], os.X_OK)
        assert paths[kind].read_text().startswith("#!/bin/bash\n")
    assert paths["plugstack"].stat().st_mode & 0o777 == 0o644


def test_plugstack_line_matches_the_scripts(node: dict[str, Path]) -> None:
    paths = _scripts(node, plugin="/opt/slurm/lib/hase_mps.so")
    line = f"required /opt/slurm/lib/hase_mps.so pipe_dir={node['pipe']} log_dir={node['log']}"
    assert paths["plugstack"].read_text().splitlines()[-1] == line
    assert f"PIPE_BASE={node['pipe']}\n" in paths["prolog"].read_text()
    assert plugstack_line(MpsConfig()) == ("required /usr/local/lib/slurm/hase_mps.so "
                                           "pipe_dir=/run/hase-mps log_dir=/var/log/hase-mps")


@pytest.mark.parametrize("var", ["SLURM_HASE_MPS", "SPANK_SLURM_HASE_MPS",
                                 "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"])
def test_prolog_then_epilog_exact_sequence(node: dict[str, Path], var: str) -> None:
    scripts = _scripts(node)
    pipe, log = node["pipe"] / "4242", node["log"] / "4242"
    proc = _run(scripts["prolog"], node, **{var: "50"})
    assert proc.returncode == 0, proc.stderr
    assert _calls(node) == [
        f"args=[-d] stdin=[] pipe=[{pipe}] log=[{log}] gpus=[0]",
        f"args=[] stdin=[set_default_active_thread_percentage 50] pipe=[{pipe}] log=[{log}] "
        "gpus=[0]",
        f"args=[] stdin=[start_server -uid 1234] pipe=[{pipe}] log=[{log}] gpus=[0]",
    ]
    assert _daemon_env(node) == ["order=[PCI_BUS_ID] share=[50]"]
    for line in proc.stderr.splitlines():
        assert line.startswith("hase-mps-prolog job=4242: "), line
    assert "share 50%" in proc.stderr
    assert "job=4242" in (node["root"] / "hase-mps.log").read_text()

    proc = _run(scripts["epilog"], node)
    assert proc.returncode == 0, proc.stderr
    assert _calls(node)[3:] == [f"args=[] stdin=[quit] pipe=[{pipe}] log=[{log}] gpus=[0]"]
    assert not pipe.exists() and log.exists()  # keep_logs default
    assert _stopped(node)
    assert all(ln.startswith("hase-mps-epilog job=4242: ") for ln in proc.stderr.splitlines())


def test_no_mps_job_does_nothing(node: dict[str, Path]) -> None:
    scripts = _scripts(node)
    for kind in ("prolog", "epilog"):
        proc = _run(scripts[kind], node)
        assert proc.returncode == 0, proc.stderr
        assert "nothing to do" in proc.stderr and "job=4242" in proc.stderr
    assert _calls(node) == []
    assert not node["pipe"].exists()


@pytest.mark.parametrize(("policy", "rc"), [("drain", 1), ("ignore", 0)])
def test_missing_control_binary(node: dict[str, Path], policy: str, rc: int) -> None:
    scripts = _scripts(node, on_failure=policy)
    proc = _run(scripts["prolog"], node, path="/usr/bin:/bin", SLURM_HASE_MPS="30")
    assert proc.returncode == rc
    assert "nvidia-cuda-mps-control not found" in proc.stderr
    assert "hase gpu mps render --mps-control PATH" in proc.stderr  # the option that fixes it
    assert "mps_control" not in proc.stderr
    assert f"failure policy {policy}" in proc.stderr
    assert _calls(node) == []


def test_epilog_missing_control_binary_names_the_option(node: dict[str, Path]) -> None:
    scripts = _scripts(node)
    assert _run(scripts["prolog"], node, SLURM_HASE_MPS="30").returncode == 0
    proc = _run(scripts["epilog"], node, path="/usr/bin:/bin")
    assert proc.returncode == 1 and "cannot stop the MPS daemon" in proc.stderr
    assert "hase gpu mps render --mps-control PATH" in proc.stderr
    assert "sending SIGKILL" in proc.stderr and _stopped(node)  # killed, not orphaned


@pytest.mark.parametrize(("policy", "rc"), [("drain", 1), ("ignore", 0)])
def test_start_server_failure_applies_policy(node: dict[str, Path], policy: str, rc: int) -> None:
    scripts = _scripts(node, on_failure=policy)
    proc = _run(scripts["prolog"], node, SLURM_HASE_MPS="30", FAKE_MPS_FAIL="start_server")
    assert proc.returncode == rc
    assert "start_server -uid 1234 failed: fake failure" in proc.stderr
    # the daemon is quit and its pipe removed: the plugin must not point tasks at it
    assert _calls(node)[-1].startswith("args=[] stdin=[quit] ")
    assert _stopped(node), proc.stderr


def test_daemon_that_never_opens_its_pipe(node: dict[str, Path]) -> None:
    scripts = _scripts(node)
    proc = _run(scripts["prolog"], node, SLURM_HASE_MPS="30", FAKE_MPS_NO_PIPE="1")
    assert proc.returncode == 1
    assert "did not open" in proc.stderr and "within 1s" in proc.stderr
    assert "--start-timeout SECONDS" in proc.stderr
    assert len(_calls(node)) == 1  # -d only: no start_server, no quit without a control pipe
    assert _stopped(node), proc.stderr  # the silent daemon is killed


def test_prolog_needs_job_uid(node: dict[str, Path]) -> None:
    scripts = _scripts(node)
    proc = _run(scripts["prolog"], node, SLURM_HASE_MPS="30", SLURM_JOB_UID="")
    assert proc.returncode == 1 and "SLURM_JOB_UID is not set" in proc.stderr


@pytest.mark.parametrize(("policy", "rc"), [("drain", 1), ("ignore", 0)])
def test_epilog_quit_failure_still_stops_the_daemon(node: dict[str, Path], policy: str,
                                                    rc: int) -> None:
    scripts = _scripts(node, on_failure=policy)
    assert _run(scripts["prolog"], node, SLURM_HASE_MPS="30").returncode == 0
    proc = _run(scripts["epilog"], node, FAKE_MPS_FAIL="quit")
    assert proc.returncode == rc and "quit failed: fake failure" in proc.stderr
    assert f"failure policy {policy}" in proc.stderr
    assert _stopped(node), proc.stderr  # killed and removed under either policy


def test_epilog_drops_logs_when_asked(node: dict[str, Path]) -> None:
    scripts = _scripts(node, keep_logs=False)
    assert _run(scripts["prolog"], node, SLURM_HASE_MPS="30").returncode == 0
    assert _run(scripts["epilog"], node).returncode == 0
    assert not (node["log"] / "4242").exists()


@pytest.mark.parametrize(("data", "message"), [
    ({"on_failure": "reboot"}, "on_failure must be one of drain, ignore, not 'reboot'"),
    ({"pipe_dir": "relative"}, "pipe_dir must be an absolute directory other than /, not 'relative'"),
    ({"log_dir": "/tmp/../"}, "log_dir must be an absolute directory other than /, not '/tmp/../'"),
    ({"start_timeout_s": "10"}, "start_timeout_s must be int, not '10'"),
    ({"syslog": "yes"}, "syslog must be bool, not 'yes'"),
    ({"log_file": "x\ny"}, "log_file must be a single line, not 'x\\ny'"),
    ({"start_timeout_s": 0}, "start_timeout_s must be 1..600 seconds, not 0"),
    ({"mps_control": ""}, "mps_control must name the nvidia-cuda-mps-control binary, not ''"),
    ({"pipe_dir": "/run/hase mps"}, "pipe_dir may hold only letters, digits and _@%+=:,./- "
                                    "(plugstack.conf splits its arguments on whitespace), "
                                    "not '/run/hase mps'"),
    ({"log_dir": "/var/log/$(id)"}, "log_dir may hold only letters, digits and _@%+=:,./- "
                                    "(plugstack.conf splits its arguments on whitespace), "
                                    "not '/var/log/$(id)'"),
    ({"plugin": "hase_mps.so"}, "plugin must be an absolute path, not 'hase_mps.so'"),
    ({"pipe_dir": "/" + "p" * 1023}, "pipe_dir is 1024 characters long; the SPANK plugin takes "
                                     "at most 1023"),
])
def test_bad_config_names_the_key(data: dict[str, object], message: str) -> None:
    with pytest.raises(MpsConfigError) as err:
        MpsConfig.from_mapping(data)
    assert str(err.value) == message
    assert isinstance(err.value, ConfigError) and err.value.settings == tuple(data)


def test_unknown_key_is_typed_error() -> None:
    with pytest.raises(ConfigError, match=r"unknown MPS setting\(s\) bogus; known: pipe_dir, "):
        MpsConfig.from_mapping({"bogus": 1})


@pytest.mark.parametrize(("pipe", "log", "relation"), [
    ("/tmp/hase-mps", "/tmp/hase-mps", "is the same directory as"),
    ("/tmp/hase-mps", "/tmp/hase-mps/", "is the same directory as"),
    ("/tmp/hase-mps", "//tmp/./hase-mps", "is the same directory as"),
    ("/tmp/hase-mps", "/tmp/hase-mps/logs", "is inside"),
    ("/tmp/hase-mps", "/tmp/x/../hase-mps/logs", "is inside"),
    ("/tmp/hase-mps/pipes", "/tmp/hase-mps", "contains"),
    ("/tmp/hase-mps", "/tmp", "contains"),
])
def test_overlapping_pipe_and_log_dirs_refused(pipe: str, log: str, relation: str) -> None:
    with pytest.raises(MpsConfigError) as err:
        MpsConfig.from_mapping({"pipe_dir": pipe, "log_dir": log})
    assert str(err.value).startswith(f"log_dir {log!r} {relation} pipe_dir {pipe!r}: ")
    assert set(err.value.settings) == {"pipe_dir", "log_dir"}
    worded = err.value.worded({"pipe_dir": "--pipe-dir", "log_dir": "--log-dir"})
    assert worded.startswith(f"--log-dir {log!r} {relation} --pipe-dir {pipe!r}: ")
    assert "pipe_dir" not in worded and "log_dir" not in worded


@pytest.mark.parametrize(("pipe", "log"), [
    ("/tmp/hase-mps", "/tmp/hase-mps-log"),  # a common prefix is not nesting
    ("/run/hase/pipes", "/run/hase/logs"),
])
def test_separate_dirs_accepted(pipe: str, log: str) -> None:
    assert MpsConfig(pipe_dir=pipe, log_dir=log).log_dir == log


def test_message_values_are_not_templates() -> None:
    with pytest.raises(MpsConfigError, match=r"not 'rel/\{log_dir\}'"):
        MpsConfig(pipe_dir="rel/{log_dir}")


def test_logs_survive_the_epilog_with_keep_logs(node: dict[str, Path]) -> None:
    """What the overlap check protects: the job's logs outlive the epilog."""
    scripts = _scripts(node)
    assert _run(scripts["prolog"], node, SLURM_HASE_MPS="30").returncode == 0
    (node["log"] / "4242" / "control.log").write_text("daemon log\n")
    assert _run(scripts["epilog"], node).returncode == 0
    assert (node["log"] / "4242" / "control.log").read_text() == "daemon log\n"


def test_defaults_stay_out_of_tmp() -> None:
    cfg = MpsConfig()
    assert (cfg.pipe_dir, cfg.log_dir) == ("/run/hase-mps", "/var/log/hase-mps")


def test_config_from_mapping_ok() -> None:
    cfg = MpsConfig.from_mapping({"on_failure": "ignore", "start_timeout_s": 3, "syslog": False})
    assert cfg.on_failure == "ignore" and cfg.start_timeout_s == 3 and not cfg.syslog


def test_unknown_script_kind() -> None:
    with pytest.raises(ConfigError):
        render("postlog", MpsConfig())
