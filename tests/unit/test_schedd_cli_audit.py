"""`hase schedd`: start-up refusals that name what is wrong (metrics port/address, config not
UTF-8, state store folder, textfile folder), job ids, render-unit's --exec/--slurm-conf, and
what --dry-run writes."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_hase.cli import schedd_checks, schedd_cmd
from slurm_hase.cli.main import cli
from slurm_hase.daemon.fake import FakeBackend
from slurm_hase.store.lock import StoreLock
from slurm_hase.store.state import CycleRow, StateStore
from tests.conftest import run_main

Capsys = pytest.CaptureFixture[str]


@pytest.fixture(autouse=True)
def _fake_slurm(monkeypatch: pytest.MonkeyPatch) -> FakeBackend:
    monkeypatch.delenv("SLURM_CONF", raising=False)
    backend = FakeBackend()
    monkeypatch.setattr(schedd_cmd, "_backend", lambda: backend)
    return backend


def _cfg(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text('[schedd]\nlog_format = "text"\nlog_level = "ERROR"\n' + body)
    return path


# -- 1: the metrics endpoint ---------------------------------------------------------------

def test_run_refuses_a_metrics_port_in_use_before_writing(tmp_path: Path, busy_port: int,
                                                          capsys: Capsys) -> None:
    db = tmp_path / "s.db"
    cfg = _cfg(tmp_path, f"[schedd.metrics]\nport = {busy_port}\n")
    code, out, err = run_main(["schedd", "run", "--once", "--dry-run", "--config", str(cfg),
                               "--state-db", str(db)], capsys)
    assert code == 2 and out == ""
    assert err == (f"hase: error: [schedd.metrics] port: 127.0.0.1:{busy_port} is already in use "
                   "by another process; choose a free port (0 turns the endpoint off)\n")
    assert not db.exists()  # nothing half-done


def test_run_refuses_a_bad_metrics_address(tmp_path: Path, capsys: Capsys) -> None:
    cfg = _cfg(tmp_path, '[schedd.metrics]\nport = 9100\naddress = "not an address"\n')
    for command in (["run", "--once", "--dry-run", "--state-db", str(tmp_path / "s.db")],
                    ["render-unit"]):
        code, out, err = run_main(["schedd", *command, "--config", str(cfg)], capsys)
        assert code == 2 and out == ""
        assert err.startswith("hase: error: [schedd.metrics] address: 'not an address' is not an "
                              "IP address or host name")


def test_a_dry_run_beside_the_daemon_leaves_its_metrics_alone(tmp_path: Path, busy_port: int,
                                                              capsys: Capsys) -> None:
    db = tmp_path / "s.db"
    prom = tmp_path / "hase.prom"
    prom.write_text("the daemon's\n")
    cfg = _cfg(tmp_path, f'[schedd.metrics]\nport = {busy_port}\ntextfile = "{prom}"\n')
    with StoreLock(db):  # the running daemon (this process holds the store)
        code, _, err = run_main(["schedd", "run", "--once", "--dry-run", "--config", str(cfg),
                                 "--state-db", str(db)], capsys)
    assert code == 0, err
    assert "this dry run serves and writes no metrics" in err
    assert prom.read_text() == "the daemon's\n"


# -- 2: config files that are not UTF-8 ----------------------------------------------------

@pytest.mark.parametrize("command", [["run", "--once", "--dry-run"], ["status"], ["render-unit"],
                                     ["job", "42"]])
def test_a_config_that_is_not_utf8_is_exit_2(command: list[str], tmp_path: Path,
                                             capsys: Capsys) -> None:
    cfg = tmp_path / "bin.toml"
    cfg.write_bytes(b"\xff\xfe\x00bad")
    code, out, err = run_main(["schedd", *command, "--config", str(cfg)], capsys)
    assert code == 2 and out == ""
    assert err == (f"hase: error: config {cfg}: not UTF-8 text (byte 0xff at offset 0); TOML "
                   "files are UTF-8\n")


# -- 3: what a dry run writes, and folders that are never made up --------------------------

def test_dry_run_help_says_what_it_writes() -> None:
    text = " ".join(CliRunner().invoke(cli, ["schedd", "run", "--help"]).output.split())
    assert "nothing changes in Slurm (the cycles and their planned decisions are still " \
           "recorded in the state store)" in text
    assert "change nothing" not in text


def test_dry_run_records_in_the_store(tmp_path: Path, capsys: Capsys) -> None:
    db = tmp_path / "s.db"
    code, _, err = run_main(["schedd", "run", "--once", "--dry-run", "--config",
                             str(_cfg(tmp_path, "")), "--state-db", str(db)], capsys)
    assert code == 0, err
    store = StateStore(db)
    assert [c["dry_run"] for c in store.cycles()] == [1]
    store.close()


@pytest.mark.parametrize("dry", [["--dry-run"], []])
def test_a_missing_state_folder_is_refused_not_created(dry: list[str], tmp_path: Path,
                                                       capsys: Capsys) -> None:
    db = tmp_path / "typo" / "x.db"
    code, out, err = run_main(["schedd", "run", "--once", *dry, "--config",
                               str(_cfg(tmp_path, "")), "--state-db", str(db)], capsys)
    assert code == 2 and out == ""
    assert err == (f"hase: error: state store {db}: folder {db.parent} does not exist (create "
                   "it first, or fix --state-db / [schedd] state_db)\n")
    assert not db.parent.exists()


def test_the_default_state_folder_is_still_created(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: Capsys) -> None:
    default = tmp_path / "var" / "lib" / "slurm-hase" / "schedd.db"
    monkeypatch.setattr(schedd_checks, "DEFAULT_DB", str(default))
    code, _, err = run_main(["schedd", "run", "--once", "--dry-run", "--config",
                             str(_cfg(tmp_path, "")), "--state-db", str(default)], capsys)
    assert code == 0, err
    assert default.is_file()


def test_a_missing_textfile_folder_is_refused_not_created(tmp_path: Path, capsys: Capsys) -> None:
    prom = tmp_path / "typo" / "hase.prom"
    cfg = _cfg(tmp_path, f'[schedd.metrics]\ntextfile = "{prom}"\n')
    code, out, err = run_main(["schedd", "run", "--once", "--dry-run", "--config", str(cfg),
                               "--state-db", str(tmp_path / "s.db")], capsys)
    assert code == 2 and out == ""
    assert err == f"hase: error: [schedd.metrics] textfile: folder {prom.parent} does not exist\n"
    assert not prom.parent.exists() and not (tmp_path / "s.db").exists()


@pytest.mark.parametrize("command", [["run", "--once", "--dry-run"], ["status"], ["job", "42"],
                                     ["reset", "--dry-run"]])
def test_a_state_store_that_is_a_directory_says_so(command: list[str], tmp_path: Path,
                                                   capsys: Capsys) -> None:
    code, out, err = run_main(["schedd", *command, "--state-db", str(tmp_path)], capsys)
    assert code == 2 and out == ""
    assert err == (f"hase: error: state store {tmp_path} is a directory, not a database file "
                   "(fix --state-db / [schedd] state_db)\n")


# -- 4: job ids ------------------------------------------------------------------------------

@pytest.mark.parametrize(("job_id", "why"), [
    ("abc", "'abc' is not a Slurm job id (a positive number, e.g. 4242)"),
    ("0", "'0' is not a Slurm job id"),
    ("-5", "'-5' is not a Slurm job id"),
    ("4²", "'4²' is not a Slurm job id"),
    ("123_4", "'123_4' is an array task; the daemon records each job under its own numeric job "
              "id (`squeue -h -o %A -j 123_4` prints it)"),
    ("123_[1-5]", "'123_[1-5]' is an array task"),
])
def test_job_refuses_what_is_not_a_job_id(job_id: str, why: str, tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    StateStore(db).close()
    out = CliRunner().invoke(cli, ["schedd", "job", "--state-db", str(db), "--", job_id])
    assert out.exit_code == 2, out.output
    assert "Invalid value for 'JOB_ID': " + why in " ".join(out.output.split())


def test_job_takes_a_job_id_with_leading_zeros(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    st = StateStore(db)
    st.record_cycle(CycleRow(5.0, 0.2, "fair", False, "d", 1, 0, 1, 1, 0, 0), [], {"42": (-5, None)})
    st.close()
    out = CliRunner().invoke(cli, ["schedd", "job", "0042", "--state-db", str(db)])
    assert out.exit_code == 0, out.output
    assert out.output.startswith("job 42: ")


# -- 5: render-unit ------------------------------------------------------------------------

def test_render_unit_refuses_a_relative_exec(capsys: Capsys) -> None:
    code, out, err = run_main(["schedd", "render-unit", "--exec", "relative/hase"], capsys)
    assert code == 2 and out == ""
    assert err == ("hase: error: --exec 'relative/hase': give an absolute path (systemd refuses "
                   "a relative executable path)\n")


def test_render_unit_resolves_a_bare_exec_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: Capsys) -> None:
    exe = tmp_path / "bin" / "hase"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", str(exe.parent))
    code, out, _ = run_main(["schedd", "render-unit", "--exec", "hase"], capsys)
    assert code == 0
    assert f"ExecStart={exe} schedd run" in out
    code, out, err = run_main(["schedd", "render-unit", "--exec", "no-such-hase"], capsys)
    assert code == 2 and out == ""
    assert err == ("hase: error: --exec 'no-such-hase': not found on PATH; give the absolute "
                   "path of `hase`\n")


def test_render_unit_refuses_a_missing_slurm_conf(tmp_path: Path, capsys: Capsys) -> None:
    missing = tmp_path / "slurm.conf"
    code, out, err = run_main(["schedd", "render-unit", "--exec", "/usr/bin/hase",
                               "--slurm-conf", str(missing)], capsys)
    assert code == 2 and out == ""
    assert err == f"hase: error: --slurm-conf {missing}: no such file\n"
    missing.write_text("ClusterName=x\n")
    code, out, _ = run_main(["schedd", "render-unit", "--exec", "/usr/bin/hase",
                             "--slurm-conf", str(missing)], capsys)
    assert code == 0 and f"Environment=SLURM_CONF={missing}\n" in out


def test_render_unit_warns_when_the_default_config_is_missing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Capsys) -> None:
    default = tmp_path / "etc" / "schedd.toml"
    monkeypatch.setattr(schedd_cmd, "DEFAULT_CONFIG", str(default))
    code, out, err = run_main(["schedd", "render-unit", "--exec", "/usr/bin/hase"], capsys)
    assert code == 0 and f"--config {default}" in out
    # (pytest's tmp_path is under /tmp, which the unit's PrivateTmp hides: the second line)
    private = (f"hase: warning: the config {default} is under /tmp, and the service gets a "
               "private /tmp (PrivateTmp=true): it will not see it; move it elsewhere\n")
    assert err == (f"hase: warning: {default} does not exist; the service will not start until "
                   "it does (--config names another file)\n" + private)
    default.parent.mkdir()
    default.write_text("")
    code, _, err = run_main(["schedd", "render-unit", "--exec", "/usr/bin/hase"], capsys)
    assert code == 0 and err == private
