"""MPS prolog/epilog: render, bash -n, and run them against a fake nvidia-cuda-mps-control."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from slurm_hase.errors import ConfigError
from slurm_hase.mps.render import MpsConfig, render, write_scripts

FAKE_MPS = r"""#!/bin/bash
# fake nvidia-cuda-mps-control: records argv, stdin and the pipe dir, one line per call
stdin=""
if [ "$#" -eq 0 ]; then stdin=$(cat); fi
echo "args=[$*] stdin=[$stdin] pipe=[$CUDA_MPS_PIPE_DIRECTORY] log=[$CUDA_MPS_LOG_DIRECTORY]" >>"$FAKE_MPS_RECORD"
if [ -n "${FAKE_MPS_FAIL:-}" ] && [[ "$* $stdin" == *"$FAKE_MPS_FAIL"* ]]; then
    echo "fake failure" >&2; exit 3
fi
if [ "$1" = "-d" ] && [ -z "${FAKE_MPS_NO_PIPE:-}" ]; then : >"$CUDA_MPS_PIPE_DIRECTORY/control"; fi
exit 0
"""


@pytest.fixture()
def node(tmp_path: Path) -> dict[str, Path]:
    """A node: a bin dir with the fake control binary, pipe/log bases, a record file."""
    bindir = tmp_path / "bin dir"  # a space, to catch unquoted paths
    bindir.mkdir()
    fake = bindir / "nvidia-cuda-mps-control"
    fake.write_text(FAKE_MPS)
    fake.chmod(0o755)
    return {"bin": bindir, "pipe": tmp_path / "pipe", "log": tmp_path / "log",
            "record": tmp_path / "record.txt", "root": tmp_path}


def _scripts(node: dict[str, Path], **kw: object) -> dict[str, Path]:
    cfg = MpsConfig(pipe_dir=str(node["pipe"]), log_dir=str(node["log"]), syslog=False,
                    log_file=str(node["root"] / "hase-mps.log"), start_timeout_s=1, **kw)  # type: ignore[arg-type]
    return write_scripts(cfg, node["root"] / "out")


def _run(script: Path, node: dict[str, Path], path: str | None = None,
         **env: str) -> subprocess.CompletedProcess[str]:
    full = {"PATH": path if path is not None else f"{node['bin']}:/usr/bin:/bin",
            "FAKE_MPS_RECORD": str(node["record"]), "SLURM_JOB_ID": "4242",
            "SLURM_JOB_UID": "1234", **env}
    return subprocess.run(["/bin/bash", str(script)], env=full, capture_output=True, text=True,
                          check=False, timeout=30)


def _calls(node: dict[str, Path]) -> list[str]:
    rec = node["record"]
    return rec.read_text().splitlines() if rec.exists() else []


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


def test_write_scripts_executable(node: dict[str, Path]) -> None:
    paths = _scripts(node)
    assert sorted(paths) == ["epilog", "prolog"]
    for path in paths.values():
        assert os.access(path, os.X_OK)
        assert path.read_text().startswith("#!/bin/bash\n")


@pytest.mark.parametrize("var", ["SLURM_HASE_MPS", "SPANK_SLURM_HASE_MPS",
                                 "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"])
def test_prolog_then_epilog_exact_sequence(node: dict[str, Path], var: str) -> None:
    scripts = _scripts(node)
    pipe, log = node["pipe"] / "4242", node["log"] / "4242"
    proc = _run(scripts["prolog"], node, **{var: "50"})
    assert proc.returncode == 0, proc.stderr
    assert _calls(node) == [
        f"args=[-d] stdin=[] pipe=[{pipe}] log=[{log}]",
        f"args=[] stdin=[start_server -uid 1234] pipe=[{pipe}] log=[{log}]",
    ]
    for line in proc.stderr.splitlines():
        assert line.startswith("hase-mps-prolog job=4242: "), line
    assert "share 50%" in proc.stderr
    assert "job=4242" in (node["root"] / "hase-mps.log").read_text()

    proc = _run(scripts["epilog"], node)
    assert proc.returncode == 0, proc.stderr
    assert _calls(node)[2:] == [f"args=[] stdin=[quit] pipe=[{pipe}] log=[{log}]"]
    assert not pipe.exists() and log.exists()  # keep_logs default
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
    assert f"failure policy {policy}" in proc.stderr
    assert _calls(node) == []


@pytest.mark.parametrize(("policy", "rc"), [("drain", 1), ("ignore", 0)])
def test_start_server_failure_applies_policy(node: dict[str, Path], policy: str, rc: int) -> None:
    scripts = _scripts(node, on_failure=policy)
    proc = _run(scripts["prolog"], node, SLURM_HASE_MPS="30", FAKE_MPS_FAIL="start_server")
    assert proc.returncode == rc
    assert "start_server -uid 1234 failed: fake failure" in proc.stderr


def test_daemon_that_never_opens_its_pipe(node: dict[str, Path]) -> None:
    scripts = _scripts(node)
    proc = _run(scripts["prolog"], node, SLURM_HASE_MPS="30", FAKE_MPS_NO_PIPE="1")
    assert proc.returncode == 1
    assert "did not open" in proc.stderr and "within 1s" in proc.stderr
    assert len(_calls(node)) == 1  # -d only, no start_server


def test_prolog_needs_job_uid(node: dict[str, Path]) -> None:
    scripts = _scripts(node)
    proc = _run(scripts["prolog"], node, SLURM_HASE_MPS="30", SLURM_JOB_UID="")
    assert proc.returncode == 1 and "SLURM_JOB_UID is not set" in proc.stderr


def test_epilog_quit_failure_keeps_pipe(node: dict[str, Path]) -> None:
    scripts = _scripts(node)
    assert _run(scripts["prolog"], node, SLURM_HASE_MPS="30").returncode == 0
    proc = _run(scripts["epilog"], node, FAKE_MPS_FAIL="quit")
    assert proc.returncode == 1 and "quit failed: fake failure" in proc.stderr
    assert (node["pipe"] / "4242").exists()


def test_epilog_drops_logs_when_asked(node: dict[str, Path]) -> None:
    scripts = _scripts(node, keep_logs=False)
    assert _run(scripts["prolog"], node, SLURM_HASE_MPS="30").returncode == 0
    assert _run(scripts["epilog"], node).returncode == 0
    assert not (node["log"] / "4242").exists()


@pytest.mark.parametrize("data", [
    {"on_failure": "reboot"}, {"pipe_dir": "relative"}, {"bogus": 1},
    {"start_timeout_s": "10"}, {"syslog": "yes"}, {"log_file": "x\ny"}, {"start_timeout_s": 0},
])
def test_bad_config_is_typed_error(data: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match="mps"):
        MpsConfig.from_mapping(data)


def test_config_from_mapping_ok() -> None:
    cfg = MpsConfig.from_mapping({"on_failure": "ignore", "start_timeout_s": 3, "syslog": False})
    assert cfg.on_failure == "ignore" and cfg.start_timeout_s == 3 and not cfg.syslog


def test_unknown_script_kind() -> None:
    with pytest.raises(ConfigError):
        render("postlog", MpsConfig())
