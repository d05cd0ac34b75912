"""`hase gpu mps render`: writes both scripts with the chosen policy; bad input fails typed,
naming the option the user typed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_hase.cli.gpu_cmd import RENDER_OPTIONS, render_cmd
from slurm_hase.cli.main import cli
from slurm_hase.errors import ConfigError
from slurm_hase.mps.render import MpsConfig
from tests.conftest import run_main as _main


def test_render_cli(tmp_path: Path) -> None:
    out = tmp_path / "scripts"
    res = CliRunner().invoke(cli, ["gpu", "mps", "render", "--out", str(out), "--on-failure",
                                   "ignore", "--pipe-dir", "/run/hase-mps", "--no-syslog"])
    assert res.exit_code == 0, res.output
    prolog = (out / "hase-mps-prolog.sh").read_text()
    assert "ON_FAILURE=ignore\n" in prolog and "PIPE_BASE=/run/hase-mps\n" in prolog
    assert "logger" not in prolog
    assert "KEEP_LOGS=1\n" in (out / "hase-mps-epilog.sh").read_text()
    for name in ("hase-mps-prolog.sh", "hase-mps-epilog.sh"):
        assert subprocess.run(["bash", "-n", str(out / name)], check=False).returncode == 0


def test_render_cli_prints_and_writes_the_plugstack_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["gpu", "mps", "render", "--out", str(tmp_path), "--pipe-dir",
                                   "/run/p", "--log-dir", "/var/log/l", "--plugin", "/opt/h.so"])
    assert res.exit_code == 0, res.output
    line = "required /opt/h.so pipe_dir=/run/p log_dir=/var/log/l"
    assert res.output.splitlines()[-1].endswith(f": {line}")
    assert f"plugstack: {tmp_path / 'hase-mps-plugstack.conf'}" in res.output
    assert (tmp_path / "hase-mps-plugstack.conf").read_text().splitlines()[-1] == line


def test_render_cli_defaults_outside_tmp(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["gpu", "mps", "render", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    prolog = (tmp_path / "hase-mps-prolog.sh").read_text()
    assert "PIPE_BASE=/run/hase-mps\n" in prolog and "LOG_BASE=/var/log/hase-mps\n" in prolog
    assert "pipe_dir=/run/hase-mps log_dir=/var/log/hase-mps" in res.output


def test_render_cli_drop_logs(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["gpu", "mps", "render", "--out", str(tmp_path), "--drop-logs"])
    assert res.exit_code == 0, res.output
    assert "KEEP_LOGS=0\n" in (tmp_path / "hase-mps-epilog.sh").read_text()


def test_render_cli_rejects_relative_dir(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["gpu", "mps", "render", "--out", str(tmp_path), "--log-dir", "x"])
    assert isinstance(res.exception, ConfigError)
    assert str(res.exception) == "--log-dir must be an absolute directory other than /, not 'x'"


@pytest.mark.parametrize(("args", "relation"), [
    (["--log-dir", "/run/hase-mps"], "is the same directory as"),  # the default --pipe-dir
    (["--log-dir", "/run//hase-mps/./"], "is the same directory as"),
    (["--pipe-dir", "/run/m", "--log-dir", "/run/m/logs"], "is inside"),
    (["--pipe-dir", "/run/m/pipes", "--log-dir", "/run/m/"], "contains"),
    (["--pipe-dir", "/var/log/hase-mps/x"], "contains"),  # the default --log-dir
])
def test_render_cli_refuses_overlapping_dirs(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             args: list[str], relation: str) -> None:
    out = tmp_path / "out"
    code, stdout, err = _main(["gpu", "mps", "render", "--out", str(out), *args], capsys)
    assert code == 2 and stdout == ""
    assert err.startswith("hase: error: --log-dir '") and f"' {relation} --pipe-dir '" in err
    assert "pipe_dir" not in err and "log_dir" not in err
    assert not out.exists()  # nothing written


@pytest.mark.parametrize(("args", "message"), [
    (["--start-timeout", "0"], "--start-timeout must be 1..600 seconds, not 0"),
    (["--pipe-dir", "/tmp/.."], "--pipe-dir must be an absolute directory other than /, not '/tmp/..'"),
    (["--mps-control", " "], "--mps-control must name the nvidia-cuda-mps-control binary, not ' '"),
    (["--log-file", "/var/log/a\nb"], "--log-file must be a single line, not '/var/log/a\\nb'"),
    (["--log-file", "hase.log"], "--log-file must be an absolute path, not 'hase.log'"),
    (["--pipe-dir", "/run/hase mps"], "--pipe-dir may hold only letters, digits and _@%+=:,./- "
                                      "(plugstack.conf splits its arguments on whitespace), "
                                      "not '/run/hase mps'"),
    (["--plugin", "lib/hase_mps.so"], "--plugin must be an absolute path, not 'lib/hase_mps.so'"),
])
def test_render_cli_errors_name_the_option(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           args: list[str], message: str) -> None:
    code, _, err = _main(["gpu", "mps", "render", "--out", str(tmp_path), *args], capsys)
    assert (code, err) == (2, f"hase: error: {message}\n")


def test_every_setting_has_an_option() -> None:
    options = {o for p in render_cmd.params for o in (*p.opts, *p.secondary_opts)}
    assert set(RENDER_OPTIONS) == set(MpsConfig.__dataclass_fields__)
    for spelt in RENDER_OPTIONS.values():
        assert set(spelt.split("/")) <= options, spelt


def test_render_cli_unwritable_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, _, err = _main(["gpu", "mps", "render", "--out", str(blocker / "sub")], capsys)
    assert code == 2 and err.startswith(f"hase: error: cannot write {blocker / 'sub'}: ")
