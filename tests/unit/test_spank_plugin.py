"""The SPANK plugin compiles warning-free, exports what Slurm needs, and behaves in a fake host."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SPANK = REPO / "spank"
HEADER = Path("/usr/include/slurm/spank.h")

pytestmark = pytest.mark.skipif(
    shutil.which("gcc") is None or shutil.which("make") is None or not HEADER.is_file(),
    reason="needs gcc, make and libslurm-dev (slurm/spank.h)",
)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Build the plugin with `make -C spank` into a temp dir, plus the fake SPANK host."""
    out = tmp_path_factory.mktemp("spank")
    proc = subprocess.run(
        ["make", "-C", str(SPANK), f"BUILD_DIR={out}"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "warning" not in proc.stderr.lower(), proc.stderr
    harness = out / "harness"
    proc = subprocess.run(
        ["gcc", "-std=gnu99", "-Wall", "-Wextra", "-Werror", "-rdynamic", "-o", str(harness),
         str(SPANK / "test_harness.c"), "-ldl"],
        capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return out / "hase_mps.so", harness


def _host(built: tuple[Path, Path], ctx: str, job: int, *args: str) -> tuple[int, list[str]]:
    plugin, harness = built
    proc = subprocess.run(
        [str(harness), str(plugin), ctx, str(job), *args], capture_output=True, text=True,
        check=False, timeout=30,
    )
    return proc.returncode, proc.stdout.splitlines()


def test_exports_spank_symbols(built: tuple[Path, Path]) -> None:
    proc = subprocess.run(["nm", "-D", "--defined-only", str(built[0])],
                          capture_output=True, text=True, check=True)
    names = {line.split()[-1] for line in proc.stdout.splitlines() if line.strip()}
    for sym in ("slurm_spank_init", "slurm_spank_init_post_opt", "slurm_spank_task_init",
                "slurm_spank_exit", "plugin_name", "plugin_type", "plugin_version",
                "spank_plugin_version"):
        assert sym in names, f"{sym} not exported"


def test_plugin_identity(built: tuple[Path, Path]) -> None:
    rc, lines = _host(built, "local", 0, "--")
    assert rc == 0
    assert lines[0] == "plugin hase_mps type spank"
    assert "register hase-mps" in lines and "register hase-share-tag" in lines


def test_share_tag_help_promises_no_isolation(built: tuple[Path, Path]) -> None:
    """srun/sbatch --help read "only share GPUs with jobs carrying the same TAG", which nothing
    in slurm-hase (plugin, prolog, daemon) does: the help says what the tag is, and is not."""
    rc, lines = _host(built, "local", 0, "--")
    assert rc == 0
    usage = next(ln for ln in lines if ln.startswith("usage hase-share-tag "))
    assert "only share" not in usage
    assert "SLURM_HASE_SHARE_TAG" in usage and "not enforced" in usage


def test_remote_sets_task_env(built: tuple[Path, Path], tmp_path: Path) -> None:
    (tmp_path / "pipe" / "4242").mkdir(parents=True)
    (tmp_path / "pipe" / "4242" / "control").write_text("")  # the prolog's daemon
    rc, lines = _host(built, "remote", 4242, f"pipe_dir={tmp_path}/pipe", "log_dir=/var/log/hase",
                      "--", "hase-mps=50", "hase-share-tag=team.a")
    assert rc == 0, lines
    env = [ln.removeprefix("setenv ") for ln in lines if ln.startswith("setenv ")]
    assert env == [
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50",
        "SLURM_HASE_MPS=50",
        f"CUDA_MPS_PIPE_DIRECTORY={tmp_path}/pipe/4242",
        "CUDA_MPS_LOG_DIRECTORY=/var/log/hase/4242",
        "SLURM_HASE_SHARE_TAG=team.a",
    ]


def test_remote_defaults_dirs(built: tuple[Path, Path]) -> None:
    rc, lines = _host(built, "remote", 7, "--", "hase-mps=1")
    assert rc == 0
    assert any("/run/hase-mps/7/control is missing" in ln for ln in lines), lines
    assert not [ln for ln in lines if ln.startswith("setenv")]  # no daemon: env left alone


def test_no_option_no_env(built: tuple[Path, Path]) -> None:
    rc, lines = _host(built, "remote", 7, "--")
    assert rc == 0
    assert not [ln for ln in lines if ln.startswith("setenv")]


@pytest.mark.parametrize("ctx", ["local", "allocator"])
def test_local_exports_to_prolog(built: tuple[Path, Path], ctx: str) -> None:
    rc, lines = _host(built, ctx, 0, "--", "hase-mps=100", "hase-share-tag=x")
    assert rc == 0
    assert "jcsetenv SLURM_HASE_MPS=100" in lines
    assert "jcsetenv SLURM_HASE_SHARE_TAG=x" in lines
    assert not [ln for ln in lines if ln.startswith("setenv")]


@pytest.mark.parametrize("value", ["0", "101", "-5", "abc", "50%", "", "5O",
                                   # strtol skips leading blanks and takes a sign: these passed
                                   "+50", " 50", "\t50"])
def test_bad_percent_fails_clearly(built: tuple[Path, Path], value: str) -> None:
    rc, lines = _host(built, "local", 0, "--", f"hase-mps={value}")
    assert rc == 1
    errors = [ln for ln in lines if ln.startswith("error ")]
    assert errors and "from 1 to 100" in errors[0] and f"--hase-mps={value} " in errors[0]


@pytest.mark.parametrize(("value", "share"), [("1", "1"), ("100", "100"), ("050", "50")])
def test_digits_only_percent_accepted(built: tuple[Path, Path], value: str, share: str) -> None:
    """Leading zeros are digits (the MPS prolog takes "050" too); the share goes on as a number."""
    rc, lines = _host(built, "local", 0, "--", f"hase-mps={value}")
    assert rc == 0, lines
    assert f"jcsetenv SLURM_HASE_MPS={share}" in lines


@pytest.mark.parametrize("value", ["", "a b", "x;rm", "t" * 64])
def test_bad_tag_fails(built: tuple[Path, Path], value: str) -> None:
    rc, lines = _host(built, "local", 0, "--", f"hase-share-tag={value}")
    assert rc == 1
    assert any("--hase-share-tag" in ln for ln in lines if ln.startswith("error "))


def test_bad_plugstack_argument(built: tuple[Path, Path]) -> None:
    rc, lines = _host(built, "remote", 1, "pipe_dir=relative", "--")
    assert rc == 1
    assert any("plugstack argument 'pipe_dir=relative'" in ln for ln in lines)


@pytest.mark.skipif(shutil.which("srun") is None or shutil.which("sbatch") is None,
                    reason="needs Slurm's client commands (srun, sbatch)")
@pytest.mark.parametrize("cmd", [["srun", "--hase-mps=0", "true"],
                                 ["sbatch", "--hase-mps=101", "--wrap", "true"]])
def test_real_slurm_client_loads_plugin(built: tuple[Path, Path], tmp_path: Path,
                                        cmd: list[str]) -> None:
    """Real srun/sbatch load the plugin from plugstack.conf and reject a bad value before
    contacting any controller (the private slurm.conf points at a port nobody listens on)."""
    (tmp_path / "plugstack.conf").write_text(f"required {built[0]}\n")
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        "ClusterName=spanktest\nSlurmctldHost=localhost\nSlurmctldPort=29817\n"
        f"PlugStackConfig={tmp_path / 'plugstack.conf'}\n"
        "NodeName=n1 CPUs=1 State=UNKNOWN\nPartitionName=p Nodes=n1 Default=YES\n"
    )
    env = {"PATH": "/usr/bin:/bin", "SLURM_CONF": str(conf)}
    helped = subprocess.run([cmd[0], "--help"], env=env, capture_output=True, text=True,
                            check=False, timeout=30)
    assert "--hase-mps=PERCENT" in helped.stdout + helped.stderr
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False, timeout=30)
    assert proc.returncode != 0
    assert "hase_mps: " + cmd[1] + " is invalid" in proc.stderr
    assert "from 1 to 100" in proc.stderr


# --- the MPS trigger and directories (spank_getenv reads the harness's own environment as
# the job's) ---------------------------------------------------------------------------------

def _remote(built: tuple[Path, Path], job: int, *args: str,
            **job_env: str) -> tuple[int, list[str]]:
    """Run the plugin in remote context for job `job`; args: plugstack args, "--", options."""
    proc = subprocess.run([str(built[1]), str(built[0]), "remote", str(job), *args],
                          env={"PATH": "/usr/bin:/bin", **job_env}, capture_output=True,
                          text=True, check=False, timeout=30)
    return proc.returncode, proc.stdout.splitlines()


def _setenv(lines: list[str]) -> list[str]:
    return [ln.removeprefix("setenv ") for ln in lines if ln.startswith("setenv ")]


def _daemon(tmp_path: Path, job: int) -> list[str]:
    """A control pipe for `job` (as the prolog's daemon makes); the plugstack args to find it."""
    (tmp_path / "pipe" / str(job)).mkdir(parents=True)
    (tmp_path / "pipe" / str(job) / "control").write_text("")
    return [f"pipe_dir={tmp_path / 'pipe'}", f"log_dir={tmp_path / 'log'}"]


def test_gres_mps_job_gets_the_daemon_dirs(built: tuple[Path, Path], tmp_path: Path) -> None:
    """--gres=mps:N (slurmd set CUDA_MPS_ACTIVE_THREAD_PERCENTAGE): same trigger as the prolog."""
    args = _daemon(tmp_path, 4242)
    rc, lines = _remote(built, 4242, *args, "--", CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="50")
    assert rc == 0, lines
    assert _setenv(lines) == [f"CUDA_MPS_PIPE_DIRECTORY={tmp_path}/pipe/4242",
                              f"CUDA_MPS_LOG_DIRECTORY={tmp_path}/log/4242"]


def test_option_with_daemon_sets_everything(built: tuple[Path, Path], tmp_path: Path) -> None:
    args = _daemon(tmp_path, 4242)
    rc, lines = _remote(built, 4242, *args, "--", "hase-mps=30", "hase-share-tag=team.a")
    assert rc == 0, lines
    assert _setenv(lines) == [
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30", "SLURM_HASE_MPS=30",
        f"CUDA_MPS_PIPE_DIRECTORY={tmp_path}/pipe/4242",
        f"CUDA_MPS_LOG_DIRECTORY={tmp_path}/log/4242", "SLURM_HASE_SHARE_TAG=team.a"]


def test_option_without_daemon_warns_and_sets_nothing(built: tuple[Path, Path],
                                                      tmp_path: Path) -> None:
    """srun --hase-mps in an allocation made without it: the prolog started nothing."""
    args = _daemon(tmp_path, 1)  # another job's daemon
    rc, lines = _remote(built, 4242, *args, "--", "hase-mps=30")
    assert rc == 0, lines
    assert _setenv(lines) == []
    errors = [ln for ln in lines if ln.startswith("error ")]
    assert len(errors) == 1 and "--hase-mps=30 ignored" in errors[0]
    assert f"{tmp_path}/pipe/4242/control is missing" in errors[0]


def test_gres_job_without_daemon_is_silent(built: tuple[Path, Path], tmp_path: Path) -> None:
    rc, lines = _remote(built, 4242, f"pipe_dir={tmp_path}", "--",
                      CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="50")
    assert rc == 0 and _setenv(lines) == [] and not [ln for ln in lines if "error" in ln]


def test_empty_percentage_is_no_trigger(built: tuple[Path, Path], tmp_path: Path) -> None:
    args = _daemon(tmp_path, 4242)
    rc, lines = _remote(built, 4242, *args, "--", CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="")
    assert rc == 0 and _setenv(lines) == []


def test_default_dirs_are_outside_tmp(built: tuple[Path, Path]) -> None:
    rc, lines = _remote(built, 7, "--", "hase-mps=1")
    assert rc == 0
    assert any("/run/hase-mps/7/control is missing" in ln for ln in lines), lines


@pytest.mark.parametrize(("arg", "message"), [
    ("pipe_dir=/" + "a" * 1100, "plugstack argument pipe_dir= is too long (1101 characters, "
                                "at most 1023)"),
    ("log_dir=/var/log/a b", "plugstack argument 'log_dir=/var/log/a b' is invalid: character 11 "
                             "is not one of"),
    ("log_dir=/x;rm", "plugstack argument 'log_dir=/x;rm' is invalid: character 3"),
    ("pipe_dir=relative", "plugstack argument 'pipe_dir=relative' is invalid: expected an "
                          "absolute path"),
])
def test_bad_plugstack_dir_fails_clearly(built: tuple[Path, Path], arg: str, message: str) -> None:
    """A long path used to be cut short silently (snprintf)."""
    rc, lines = _remote(built, 1, arg, "--", "hase-mps=10")
    assert rc == 1
    assert any(ln.startswith("error hase_mps: " + message) for ln in lines), lines


def test_longest_dir_is_accepted(built: tuple[Path, Path]) -> None:
    # 1023 characters: the most the plugin takes, as the renderer (in names of at most 255
    # characters, so that the control pipe under it is missing, not ENAMETOOLONG)
    longest = ("/" + "d" * 254) * 4 + "/dd"
    assert len(longest) == 1023
    rc, lines = _remote(built, 1, f"log_dir={longest}d", "--", "hase-mps=10")
    assert rc == 1 and any("log_dir= is too long (1024 characters" in ln for ln in lines)
    rc, lines = _remote(built, 4294967295, f"pipe_dir={longest}", "--", "hase-mps=10")
    assert rc == 0 and any(f"{longest}/4294967295/control is missing" in ln for ln in lines)


def test_make_cflags_cannot_drop_required_flags(tmp_path: Path) -> None:
    """`make CFLAGS=...` on the command line used to replace -fPIC, -I and -Werror."""
    proc = subprocess.run(["make", "-n", "-C", str(SPANK), f"BUILD_DIR={tmp_path}", "CFLAGS=-O0",
                           "LDFLAGS=-g", "SLURM_INCLUDE=/opt/slurm/include"],
                          capture_output=True, text=True, check=True)
    cmd = next(ln for ln in proc.stdout.splitlines() if "hase_mps.c" in ln).split()
    for flag in ("-O0", "-g", "-fPIC", "-Werror", "-Wall", "-Wextra", "-shared",
                 "-I/opt/slurm/include"):
        assert flag in cmd, (flag, cmd)


# --- CUDA_MPS_*_DIRECTORY inherited from another job (sbatch run inside an MPS job's script: the
# new job's environment is the old job's) -------------------------------------------------------

def _unset(lines: list[str]) -> list[str]:
    return [ln.removeprefix("unsetenv ") for ln in lines if ln.startswith("unsetenv ")]


@pytest.mark.parametrize("trigger", [{}, {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50"}])
def test_other_jobs_mps_dirs_are_dropped(built: tuple[Path, Path], tmp_path: Path,
                                         trigger: dict[str, str]) -> None:
    """Job 7 was submitted from job 4242's tasks and has no daemon of its own: its tasks must not
    keep pointing CUDA at job 4242's daemon (they would run inside that job's MPS server, and
    fail when its epilog quits it)."""
    args = _daemon(tmp_path, 4242)
    rc, lines = _remote(built, 7, *args, "--", **trigger,
                        CUDA_MPS_PIPE_DIRECTORY=f"{tmp_path}/pipe/4242",
                        CUDA_MPS_LOG_DIRECTORY=f"{tmp_path}/log/4242")
    assert rc == 0, lines
    assert _unset(lines) == ["CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"]
    assert _setenv(lines) == []


def test_other_jobs_dirs_replaced_by_own_daemon(built: tuple[Path, Path], tmp_path: Path) -> None:
    args = _daemon(tmp_path, 7)
    rc, lines = _remote(built, 7, *args, "--", "hase-mps=20",
                        CUDA_MPS_PIPE_DIRECTORY=f"{tmp_path}/pipe/4242")
    assert rc == 0, lines
    assert f"CUDA_MPS_PIPE_DIRECTORY={tmp_path}/pipe/7" in _setenv(lines)


@pytest.mark.parametrize("value", ["/tmp/nvidia-mps", "{pipe}", "{pipe}/7", "{pipe}-old/4242",
                                   "{pipe}/7/"])
def test_dirs_not_of_another_job_are_kept(built: tuple[Path, Path], tmp_path: Path,
                                          value: str) -> None:
    """A node-wide daemon's directory, the job's own, or anything outside pipe_dir: left alone."""
    args = _daemon(tmp_path, 4242)
    rc, lines = _remote(built, 7, *args, "--",
                        CUDA_MPS_PIPE_DIRECTORY=value.format(pipe=f"{tmp_path}/pipe"))
    assert rc == 0, lines
    assert _unset(lines) == [] and _setenv(lines) == []


@pytest.mark.parametrize("trigger", [("hase-mps=30",), ()])
def test_unreachable_control_pipe_is_not_called_missing(built: tuple[Path, Path], tmp_path: Path,
                                                        trigger: tuple[str, ...]) -> None:
    """access() failing for another reason than ENOENT (here ENOTDIR; on a node EACCES, a pipe_dir
    the job's user cannot enter) was reported as "missing", and a gres/mps job said nothing."""
    (tmp_path / "file").write_text("")
    rc, lines = _remote(built, 7, f"pipe_dir={tmp_path}/file", "--", *trigger,
                        CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="50")
    assert rc == 0, lines
    assert _setenv(lines) == []
    errors = [ln for ln in lines if ln.startswith("error ")]
    assert errors == [f"error hase_mps: job 7: the task runs without MPS: cannot check "
                      f"{tmp_path}/file/7/control: Not a directory (the job's user must be able "
                      "to enter pipe_dir)"], lines


@pytest.mark.parametrize("header", ["slurm_version.h", "spank.h"])
def test_new_slurm_headers_rebuild_the_plugin(tmp_path: Path, header: str) -> None:
    """The plugin bakes in SLURM_VERSION_NUMBER (Slurm refuses a plugin built for another
    version): after a Slurm upgrade `make` said "up to date" and kept the old build."""
    inc = tmp_path / "include"
    shutil.copytree(HEADER.parent, inc / "slurm")
    args = ["make", "-C", str(SPANK), f"BUILD_DIR={tmp_path / 'out'}", f"SLURM_INCLUDE={inc}"]
    subprocess.run(args, capture_output=True, text=True, check=True)
    assert subprocess.run([*args, "-q"], capture_output=True, check=False).returncode == 0
    built_at = (tmp_path / "out" / "hase_mps.so").stat().st_mtime
    os.utime(inc / "slurm" / header, (built_at + 10, built_at + 10))  # the upgrade
    assert subprocess.run([*args, "-q"], capture_output=True, check=False).returncode == 1


# --- CUDA_VISIBLE_DEVICES in the MPS server's numbering: the prolog's daemon serves the Slurm GPUs
# listed in <pipe>/slurm-gpus, renumbered from 0 in that order (NVIDIA: with CUDA_VISIBLE_DEVICES
# set on the daemon, a client sees the remapped devices). Slurm's CUDA_VISIBLE_DEVICES is the
# global number (or, with ConstrainDevices, the index among the step's GPUs): neither is the
# server's. -----------------------------------------------------------------------------------------

def _gpu_daemon(tmp_path: Path, job: int, served: str | None) -> list[str]:
    """The job's daemon, serving the Slurm GPUs `served` (the prolog's slurm-gpus file; None: no
    file, as a prolog rendered before it wrote one)."""
    args = _daemon(tmp_path, job)
    if served is not None:
        (tmp_path / "pipe" / str(job) / "slurm-gpus").write_text(served)
    return args


def _visible(lines: list[str]) -> list[str]:
    return [ln for ln in _setenv(lines) if ln.startswith("CUDA_VISIBLE_DEVICES=")]


def _errors(lines: list[str]) -> list[str]:
    return [ln for ln in lines if ln.startswith("error ")]


@pytest.mark.parametrize(("served", "env", "visible"), [
    ("1,3\n", {"SLURM_STEP_GPUS": "3", "SLURM_JOB_GPUS": "1,3", "CUDA_VISIBLE_DEVICES": "3"}, "1"),
    ("1,3\n", {"SLURM_STEP_GPUS": "1", "SLURM_JOB_GPUS": "1,3", "CUDA_VISIBLE_DEVICES": "0"}, "0"),
    ("2\n", {"SLURM_JOB_GPUS": "2", "CUDA_VISIBLE_DEVICES": "2"}, "0"),
    ("0,1,2,3\n", {"SLURM_STEP_GPUS": "3,1"}, "3,1"),
    ("3,0\n", {"SLURM_STEP_GPUS": "0,3"}, "1,0"),  # the daemon's order, not the numbers'
    (" 1 , 3 ", {"SLURM_STEP_GPUS": "3"}, "1"),  # blanks and no newline
    ("01,3\n", {"SLURM_STEP_GPUS": "1"}, "0"),  # numbers compare as numbers
])
def test_task_gets_the_servers_device_numbers(built: tuple[Path, Path], tmp_path: Path,
                                             served: str, env: dict[str, str],
                                             visible: str) -> None:
    args = _gpu_daemon(tmp_path, 4242, served)
    rc, lines = _remote(built, 4242, *args, "--", "hase-mps=50", **env)
    assert rc == 0, lines
    assert _visible(lines) == [f"CUDA_VISIBLE_DEVICES={visible}"], lines
    assert _errors(lines) == [], lines


def test_gres_mps_job_is_renumbered_too(built: tuple[Path, Path], tmp_path: Path) -> None:
    args = _gpu_daemon(tmp_path, 4242, "1\n")
    rc, lines = _remote(built, 4242, *args, "--", CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="50",
                        SLURM_JOB_GPUS="1", CUDA_VISIBLE_DEVICES="1")
    assert rc == 0 and _visible(lines) == ["CUDA_VISIBLE_DEVICES=0"], lines


def test_a_one_gpu_daemon_serves_device_0_without_slurms_gpu_variables(
        built: tuple[Path, Path], tmp_path: Path) -> None:
    # a --gres=mps job may have neither SLURM_STEP_GPUS nor SLURM_JOB_GPUS; Slurm gives it one
    # GPU a node, which its daemon serves as device 0
    args = _gpu_daemon(tmp_path, 4243, "2\n")
    rc, lines = _remote(built, 4243, *args, "--", CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="50",
                        CUDA_VISIBLE_DEVICES="2")
    assert rc == 0 and _visible(lines) == ["CUDA_VISIBLE_DEVICES=0"], lines
    assert not [ln for ln in lines if "left as Slurm set it" in ln], lines


@pytest.mark.parametrize(("served", "env", "why"), [
    (None, {"SLURM_STEP_GPUS": "1"}, "cannot read {pipe}/slurm-gpus: No such file or directory"),
    ("1,3\n", {"SLURM_STEP_GPUS": "2", "SLURM_JOB_GPUS": "1,2"},
     "GPU 2 of this step is not one the job's MPS daemon serves (1,3)"),
    ("1,3\n", {}, "neither SLURM_STEP_GPUS nor SLURM_JOB_GPUS is set"),
    ("1,3\n", {"SLURM_STEP_GPUS": "", "SLURM_JOB_GPUS": ""},
     "neither SLURM_STEP_GPUS nor SLURM_JOB_GPUS is set"),
    ("", {"SLURM_STEP_GPUS": "1"}, "{pipe}/slurm-gpus is malformed (an empty entry)"),
    ("1,,3", {"SLURM_STEP_GPUS": "1"}, "{pipe}/slurm-gpus is malformed (an empty entry)"),
    ("1\n3\n", {"SLURM_STEP_GPUS": "1"}, "{pipe}/slurm-gpus is malformed (more than one line)"),
    (",".join(str(i) for i in range(65)), {"SLURM_STEP_GPUS": "1"},
     "{pipe}/slurm-gpus is malformed (more than 64 entries)"),
    ("1," * 3000 + "1", {"SLURM_STEP_GPUS": "1"},
     "{pipe}/slurm-gpus is malformed (longer than 4095 bytes)"),
    ("1,3", {"SLURM_STEP_GPUS": "1,,3"}, "SLURM_STEP_GPUS=1,,3 is malformed (an empty entry)"),
    ("1,3", {"SLURM_STEP_GPUS": "1," * 3000}, "SLURM_STEP_GPUS is longer than 4095 bytes"),
])
def test_unknown_numbering_leaves_cuda_visible_devices_and_says_why(
        built: tuple[Path, Path], tmp_path: Path, served: str | None, env: dict[str, str],
        why: str) -> None:
    """The task is never failed for this: CUDA_VISIBLE_DEVICES stays as Slurm set it, the MPS
    directories are still set, and one error line says why."""
    args = _gpu_daemon(tmp_path, 4242, served)
    rc, lines = _remote(built, 4242, *args, "--", "hase-mps=50", CUDA_VISIBLE_DEVICES="1", **env)
    assert rc == 0, lines
    assert _visible(lines) == [], lines
    assert f"CUDA_MPS_PIPE_DIRECTORY={tmp_path}/pipe/4242" in _setenv(lines)
    pipe = f"{tmp_path}/pipe/4242"
    assert _errors(lines) == [
        "error hase_mps: job 4242: CUDA_VISIBLE_DEVICES left as Slurm set it (1), which may not "
        "name this task's GPUs in the MPS server's numbering: " + why.format(pipe=pipe)], lines


def test_no_daemon_no_renumbering(built: tuple[Path, Path], tmp_path: Path) -> None:
    """Another job's daemon (and its file) is not this job's."""
    args = _gpu_daemon(tmp_path, 1, "0\n")
    rc, lines = _remote(built, 4242, *args, "--", CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="50",
                        SLURM_JOB_GPUS="0", CUDA_VISIBLE_DEVICES="0")
    assert rc == 0 and _setenv(lines) == [] and _errors(lines) == [], lines
