"""`hase gpu mps render`: writes both scripts with the chosen policy; bad input fails typed."""

from __future__ import annotations

import subprocess
from pathlib import Path

from click.testing import CliRunner

from slurm_hase.cli.main import cli
from slurm_hase.errors import ConfigError


def test_render_cli(tmp_path: Path) -> None:
    out = tmp_path / "scripts"
    res = CliRunner().invoke(cli, ["gpu", "mps", "render", "--out", str(out), "--on-failure",
                                   "ignore", "--pipe-dir", "/run/hase-mps", "--no-syslog"])
    assert res.exit_code == 0, res.output
    prolog = (out / "hase-mps-prolog.sh").read_text()
    assert "ON_FAILURE=ignore\n" in prolog and "PIPE_BASE=/run/hase-mps\n" in prolog
    assert "logger" not in prolog
    for name in ("hase-mps-prolog.sh", "hase-mps-epilog.sh"):
        assert subprocess.run(["bash", "-n", str(out / name)], check=False).returncode == 0


def test_render_cli_rejects_relative_dir(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["gpu", "mps", "render", "--out", str(tmp_path), "--log-dir", "x"])
    assert isinstance(res.exception, ConfigError)
    assert "log_dir must be an absolute directory" in str(res.exception)
