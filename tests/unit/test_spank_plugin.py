"""The SPANK plugin compiles warning-free, exports what Slurm needs, and behaves in a fake host."""

from __future__ import annotations

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


def test_remote_sets_task_env(built: tuple[Path, Path]) -> None:
    rc, lines = _host(built, "remote", 4242, "pipe_dir=/run/hase", "log_dir=/var/log/hase",
                      "--", "hase-mps=50", "hase-share-tag=team.a")
    assert rc == 0, lines
    env = [ln.removeprefix("setenv ") for ln in lines if ln.startswith("setenv ")]
    assert env == [
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50",
        "SLURM_HASE_MPS=50",
        "CUDA_MPS_PIPE_DIRECTORY=/run/hase/4242",
        "CUDA_MPS_LOG_DIRECTORY=/var/log/hase/4242",
        "SLURM_HASE_SHARE_TAG=team.a",
    ]


def test_remote_defaults_dirs(built: tuple[Path, Path]) -> None:
    rc, lines = _host(built, "remote", 7, "--", "hase-mps=1")
    assert rc == 0
    assert "setenv CUDA_MPS_PIPE_DIRECTORY=/tmp/hase-mps/7" in lines
    assert "setenv CUDA_MPS_LOG_DIRECTORY=/tmp/hase-mps-log/7" in lines


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


@pytest.mark.parametrize("value", ["0", "101", "-5", "abc", "50%", "", "5O"])
def test_bad_percent_fails_clearly(built: tuple[Path, Path], value: str) -> None:
    rc, lines = _host(built, "local", 0, "--", f"hase-mps={value}")
    assert rc == 1
    errors = [ln for ln in lines if ln.startswith("error ")]
    assert errors and "from 1 to 100" in errors[0] and f"--hase-mps={value} " in errors[0]


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
