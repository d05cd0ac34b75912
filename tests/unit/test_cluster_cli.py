"""`hase cluster env`: prints SLURM_CONF only for a cluster that is there; `down` of a folder
that is not there makes nothing."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_main as _main


def _cluster(root: Path) -> Path:
    conf = root / "etc" / "slurm.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text("ClusterName=test\n")
    return conf


def test_env_without_cluster_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "nope"
    code, out, err = _main(["cluster", "env", "--dir", str(root)], capsys)
    assert (code, out) == (1, "")
    assert err == (f"hase: error: no cluster at {root}: {root}/etc/slurm.conf does not exist; "
                   f"start one with 'hase cluster up --dir {root}'\n")
    # the same exit code as `hase cluster status` for a cluster that is not there
    status_code, _, _ = _main(["cluster", "status", "--dir", str(root)], capsys)
    assert status_code == code


def test_env_without_cluster_from_environment(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HASE_CLUSTER_DIR", str(tmp_path))
    code, out, err = _main(["cluster", "env"], capsys)
    assert code == 1 and out == "" and f"{tmp_path}/etc/slurm.conf does not exist" in err
    assert "hase cluster up" in err


def test_env_prints_export_for_a_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = _cluster(tmp_path)
    code, out, err = _main(["cluster", "env", "--dir", str(tmp_path)], capsys)
    assert (code, out, err) == (0, f"export SLURM_CONF={conf}\n", "")


def test_env_output_survives_eval(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = _cluster(tmp_path / "a b$c")
    code, out, _ = _main(["cluster", "env", "--dir", str(tmp_path / "a b$c")], capsys)
    assert code == 0
    shell = subprocess.run(["bash", "-c", f'eval {shlex.quote(out)}; printf %s "$SLURM_CONF"'],
                           capture_output=True, text=True, check=True)
    assert shell.stdout == str(conf)


def test_up_timeout_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HASE_CLUSTER_TIMEOUT reaches `up` (run.sh passes no --timeout); --timeout wins."""
    from click.testing import CliRunner

    from slurm_hase.cli.main import cli
    from slurm_hase.slurm.localcluster import manager

    seen: list[float] = []

    def fake_up(self: object, progress: object = None, timeout_s: float = 0.0) -> object:
        seen.append(timeout_s)
        raise SystemExit(0)

    monkeypatch.setattr(manager.LocalCluster, "up", fake_up)
    args = ["cluster", "up", "--dir", str(tmp_path)]
    CliRunner().invoke(cli, args, env={"HASE_CLUSTER_TIMEOUT": "300"})
    CliRunner().invoke(cli, [*args, "--timeout", "45"], env={"HASE_CLUSTER_TIMEOUT": "300"})
    CliRunner().invoke(cli, args, env={"HASE_CLUSTER_TIMEOUT": None})
    assert seen == [300.0, 45.0, 90.0]
    bad = CliRunner().invoke(cli, args, env={"HASE_CLUSTER_TIMEOUT": "soon"})
    assert bad.exit_code == 2 and "HASE_CLUSTER_TIMEOUT" in bad.output


def test_down_of_a_mistyped_dir_makes_nothing(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """It created the folder and a cluster.lock in it, leaving a stray cluster folder behind."""
    root = tmp_path / "typo"
    code, out, _ = _main(["cluster", "down", "--dir", str(root)], capsys)
    assert (code, out) == (0, "cluster was not running\n")
    assert not root.exists()
