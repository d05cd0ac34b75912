"""`hase schedd render-unit`: SLURM_CONF from the shell, and the paths the unit's sandbox
(PrivateTmp=true, ProtectSystem=full) would hide from the service or keep it from writing."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hase.cli.schedd_checks import unit_sandbox_warnings
from slurm_hase.daemon.config import load_config
from tests.conftest import run_main

Capsys = pytest.CaptureFixture[str]
RENDER = ["schedd", "render-unit", "--exec", "/usr/bin/hase"]


def test_slurm_conf_of_the_shell_goes_into_the_unit_with_a_note(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Capsys) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    code, out, err = run_main(RENDER, capsys)
    assert code == 0 and f"Environment=SLURM_CONF={conf}\n" in out
    assert (f"hase: note: the unit sets SLURM_CONF={conf}, taken from this shell "
            "(--slurm-conf names another file)\n") in err
    other = tmp_path / "other.conf"
    other.write_text("ClusterName=y\n")
    code, out, err = run_main([*RENDER, "--slurm-conf", str(other)], capsys)
    assert code == 0 and f"Environment=SLURM_CONF={other}\n" in out and "note" not in err


def test_a_shell_slurm_conf_naming_no_file_is_refused_naming_the_variable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Capsys) -> None:
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "gone.conf"))
    code, out, err = run_main(RENDER, capsys)
    assert code == 2 and out == ""
    assert err == f"hase: error: SLURM_CONF {tmp_path / 'gone.conf'}: no such file\n"


def test_without_slurm_conf_anywhere_the_unit_has_none(
        monkeypatch: pytest.MonkeyPatch, capsys: Capsys) -> None:
    monkeypatch.delenv("SLURM_CONF", raising=False)
    code, out, _ = run_main(RENDER, capsys)
    assert code == 0 and "SLURM_CONF" not in out


def test_paths_the_sandbox_hides_or_protects_are_warned_about(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Capsys) -> None:
    monkeypatch.delenv("SLURM_CONF", raising=False)
    cfg = tmp_path / "schedd.toml"  # pytest's tmp_path is under /tmp
    cfg.write_text('[schedd]\nstate_db = "/etc/slurm-hase/schedd.db"\n')
    code, out, err = run_main([*RENDER, "--config", str(cfg)], capsys)
    assert code == 0 and f"--config {cfg}" in out
    assert err.splitlines() == [
        f"hase: warning: the config {cfg} is under /tmp, and the service gets a private /tmp "
        "(PrivateTmp=true): it will not see it; move it elsewhere",
        "hase: warning: the state store /etc/slurm-hase/schedd.db is under /etc, which the "
        "service may not write (ProtectSystem=full); use /var/lib/slurm-hase (the unit's "
        "StateDirectory)"]


def test_sandbox_warnings_cover_the_model_and_metrics_and_pass_good_paths(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[schedd]\nstate_db = "/var/lib/slurm-hase/schedd.db"\n'
                   'model = "/var/tmp/m.json"\n'
                   '[schedd.metrics]\ntextfile = "/usr/lib/node_exporter/hase.prom"\n')
    lines = unit_sandbox_warnings("/etc/slurm-hase/schedd.toml", load_config(cfg))
    assert [ln.split(" is under ")[0] for ln in lines] == [
        "the model /var/tmp/m.json", "the metrics textfile /usr/lib/node_exporter/hase.prom"]
    good = tmp_path / "g.toml"
    good.write_text('[schedd]\nmodel = "shipped"\n')
    assert unit_sandbox_warnings("/etc/slurm-hase/schedd.toml", load_config(good)) == []
    assert unit_sandbox_warnings("/tmpfoo/schedd.toml", None) == []  # /tmpfoo is not /tmp
