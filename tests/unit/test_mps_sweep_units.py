"""The systemd service and timer `hase gpu mps render` writes for the sweep: systemd accepts
them (systemd-analyze verify), their command is the sweep of the rendered scripts' folder, and
bad values are refused naming them."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_hase.errors import ConfigError
from slurm_hase.mps.units import UNIT_FILES, render_units, write_units
from tests.conftest import run_main

HASE = str(Path(sys.executable).with_name("hase"))


def _verify(paths: list[Path]) -> subprocess.CompletedProcess[str]:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (Debian package systemd)")
    return subprocess.run(["systemd-analyze", "verify", *map(str, paths)], capture_output=True,
                          text=True, check=False, timeout=60)


def _exec_start(service: str) -> list[str]:
    (line,) = [x for x in service.splitlines() if x.startswith("ExecStart=")]
    return shlex.split(line.removeprefix("ExecStart="))


def test_units_verify_and_name_the_scripts_folder(tmp_path: Path) -> None:
    folder = tmp_path / "etc slurm" / "hase"  # a space: quoted for systemd
    folder.mkdir(parents=True)
    texts = render_units(folder, every_min=20, hase=HASE, slurm_conf="/etc/slurm/slurm.conf")
    paths = write_units(folder, texts)
    assert {p.name for p in paths.values()} == set(UNIT_FILES.values())
    assert all(p.stat().st_mode & 0o777 == 0o644 for p in paths.values())
    res = _verify(list(paths.values()))
    assert res.returncode == 0 and res.stderr == "", res.stderr
    service = texts["sweep-service"]
    assert _exec_start(service) == [HASE, "gpu", "mps", "sweep", "--scripts", str(folder)]
    assert "Environment=SLURM_CONF=/etc/slurm/slurm.conf" in service.splitlines()
    assert "OnUnitActiveSec=20min" in texts["sweep-timer"].splitlines()
    assert f"systemctl link {folder}/hase-mps-sweep.service" in service


def test_a_bad_unit_is_caught_by_the_check(tmp_path: Path) -> None:
    """The check itself fails on a unit systemd refuses (so the test above can fail)."""
    bad = tmp_path / "bad.service"
    bad.write_text("[Service]\nType=oneshot\nExecStart=hase gpu mps sweep\n")
    assert _verify([bad]).returncode != 0


@pytest.mark.parametrize(("kw", "message"), [
    ({"every_min": 0}, "sweep_every_min must be 1..1440 minutes, not 0"),
    ({"hase": "bin/hase"}, "hase: 'bin/hase' must be an absolute path"),
    ({"slurm_conf": "/etc/slurm.conf\nExecStart=/bin/sh"}, "slurm_conf: .* cannot go into a unit"),
])
def test_bad_values_are_named(tmp_path: Path, kw: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        render_units(tmp_path, **kw)  # type: ignore[arg-type]


def test_a_folder_with_a_newline_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="scripts_dir: .* cannot go into a unit file"):
        render_units(tmp_path / "a\nb", hase=HASE)


def test_render_writes_the_units_with_slurm_conf(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_CONF", "/srv/slurm/slurm.conf")
    out = tmp_path / "hase"
    code, stdout, err = run_main(["gpu", "mps", "render", "--out", str(out), "--sweep-every", "5",
                                  "--hase", "/opt/slurm-hase/bin/hase"], capsys)
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == [
        "hase-mps-epilog.sh", "hase-mps-plugstack.conf", "hase-mps-prolog.sh",
        "hase-mps-sweep.service", "hase-mps-sweep.timer"]
    service = (out / "hase-mps-sweep.service").read_text()
    assert _exec_start(service) == ["/opt/slurm-hase/bin/hase", "gpu", "mps", "sweep",
                                    "--scripts", str(out)]
    assert "Environment=SLURM_CONF=/srv/slurm/slurm.conf" in service.splitlines()
    assert "OnBootSec=5min" in (out / "hase-mps-sweep.timer").read_text().splitlines()
    assert (f"sweep timer: systemctl link {out}/hase-mps-sweep.service "
            f"{out}/hase-mps-sweep.timer && systemctl enable --now hase-mps-sweep.timer") in stdout


def test_render_refuses_a_bad_interval_before_writing(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "hase"
    code, _out, err = run_main(["gpu", "mps", "render", "--out", str(out), "--sweep-every", "0"],
                               capsys)
    assert code == 2 and "--sweep-every" in err
    assert not out.exists()


def test_the_schedd_unit_verifies_too(tmp_path: Path) -> None:
    """hase-schedd.service, with a config path systemd must unquote (a space, `%`, `$`)."""
    from slurm_hase.daemon.unit import render_unit

    config = tmp_path / "my 100% $conf.toml"
    config.write_text("")
    unit = tmp_path / "hase-schedd.service"
    unit.write_text(render_unit(config_path=str(config), exec_start=HASE, user="root",
                                slurm_conf="/etc/slurm/slurm.conf"))
    res = _verify([unit])
    assert res.returncode == 0 and res.stderr == "", res.stderr
    (line,) = [x for x in unit.read_text().splitlines() if x.startswith("ExecStart=")]
    # systemd undoes `%%` and `$$`; shlex undoes the quotes
    words = shlex.split(line.removeprefix("ExecStart=").replace("%%", "%").replace("$$", "$"))
    assert words == [HASE, "schedd", "run", "--config", str(config)]
