"""`hase schedd`: refusals with `hase: error:` messages, systemd quoting, status --json shape."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_hase.cli import schedd_cmd
from slurm_hase.cli.main import cli
from slurm_hase.cli.slurm_env import check_slurm_conf
from slurm_hase.daemon.config import DaemonConfig
from slurm_hase.daemon.fake import FakeBackend
from slurm_hase.daemon.unit import render_unit
from slurm_hase.errors import ConfigError, SlurmError, StoreError
from slurm_hase.slurm.types import Job, JobState, JobUpdate
from slurm_hase.store.state import CycleRow, StateStore
from tests.conftest import run_main as _main


def _no_backend() -> None:
    raise AssertionError("Slurm must not be contacted")


def _exec_words(text: str) -> list[str]:
    """The ExecStart= line split and unescaped as systemd does for arguments."""
    line = next(ln for ln in text.splitlines() if ln.startswith("ExecStart="))
    words = shlex.split(line.removeprefix("ExecStart="))  # "..." with \" and \\ escapes
    return [words[0].replace("%%", "%")] + [
        w.replace("%%", "%").replace("$$", "$") for w in words[1:]]


# -- 1: render-unit -o into a directory that does not exist ------------------------------

def test_render_unit_output_error_names_the_path(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "no-such-dir" / "x.service"
    out = CliRunner().invoke(cli, ["schedd", "render-unit", "-o", str(target)])
    assert isinstance(out.exception, ConfigError) and str(target) in str(out.exception)
    code, _, err = _main(["schedd", "render-unit", "-o", str(target)], capsys)
    assert code == 2
    assert err.startswith(f"hase: error: cannot write unit file {target}: ")
    assert "Traceback" not in err and not target.parent.exists()


# -- 2: quoting for systemd, user names --------------------------------------------------

def test_render_unit_quotes_paths_with_spaces(tmp_path: Path) -> None:
    cfg = tmp_path / "ok space.toml"
    cfg.write_text("")
    target = tmp_path / "u.service"
    out = CliRunner().invoke(cli, ["schedd", "render-unit", "--config", str(cfg),
                                   "--exec", "/x y/hase", "-o", str(target)])
    assert out.exit_code == 0, out.output
    text = target.read_text()
    assert f'ExecStart="/x y/hase" schedd run --config "{cfg}"' in text
    assert _exec_words(text) == ["/x y/hase", "schedd", "run", "--config", str(cfg)]


def test_render_unit_escapes_quotes_backslashes_specifiers_and_variables() -> None:
    odd = '/srv/a "b"\\c %n $HOME;/s.toml'
    text = render_unit(config_path=odd, exec_start="/opt/h%i $x/hase",
                       slurm_conf="/etc/slurm %h/slurm.conf")
    assert _exec_words(text) == ["/opt/h%i $x/hase", "schedd", "run", "--config", odd]
    line = next(ln for ln in text.splitlines() if ln.startswith("ExecStart="))
    assert "%%n" in line and "$$HOME" in line and "%n" not in line.replace("%%n", "")
    assert "$$x" not in line  # systemd does not expand variables in the executable's path
    assert 'Environment="SLURM_CONF=/etc/slurm %%h/slurm.conf"' in text


def test_render_unit_keeps_plain_paths_bare() -> None:
    text = render_unit(config_path="/etc/slurm-hase/schedd.toml", exec_start="/usr/bin/hase",
                       slurm_conf="/etc/slurm/slurm.conf")
    assert "ExecStart=/usr/bin/hase schedd run --config /etc/slurm-hase/schedd.toml\n" in text
    assert "Environment=SLURM_CONF=/etc/slurm/slurm.conf\n" in text


@pytest.mark.parametrize("exec_path", ['/opt/"q"/hase', "/opt/back\\slash/hase", "-/usr/bin/hase",
                                       "@/usr/bin/hase", "/usr/bin/hase\n", "/usr/bin/ha\tse"])
def test_render_unit_refuses_executables_systemd_cannot_take(exec_path: str) -> None:
    with pytest.raises(ConfigError, match="exec"):
        render_unit(config_path="/x.toml", exec_start=exec_path)


@pytest.mark.parametrize("user", ["root", "hase", "svc_hase-2", "first.last", "_x", "1000", "0"])
def test_render_unit_accepts_user_names_and_uids(user: str) -> None:
    assert f"\nUser={user}\n" in render_unit(config_path="/x.toml", exec_start="/h", user=user)


@pytest.mark.parametrize("user", ["bad user", "-x", ".x", "1abc", "a" * 32, "x%n", "x$y", "x;y",
                                  "4294967295", "65535", "", "root\nExecStartPre=/bin/evil"])
def test_render_unit_refuses_invalid_user(user: str) -> None:
    with pytest.raises(ConfigError, match="user"):
        render_unit(config_path="/x.toml", exec_start="/h", user=user)


def test_render_unit_cli_refuses_bad_user_with_message(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _main(["schedd", "render-unit", "--user", "bad user"], capsys)
    assert code == 2 and out == ""
    assert err.startswith("hase: error: user: 'bad user' is not a valid user name")


# -- 3/4: a state store that does not exist ------------------------------------------------

def test_reset_refuses_missing_store_and_creates_nothing(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.setattr(schedd_cmd, "_backend", _no_backend)
    db = tmp_path / "audit" / "none.db"
    for dry in (["--dry-run"], []):
        out = CliRunner().invoke(cli, ["schedd", "reset", *dry, "--state-db", str(db)])
        assert isinstance(out.exception, StoreError)
        assert str(out.exception) == (f"no state store at {db}: the daemon has not run with "
                                      "this store; pass the daemon's --config (its [schedd] "
                                      "state_db) or --state-db")
        assert "0 jobs" not in out.output
    code, out_text, err = _main(["schedd", "reset", "--dry-run", "--state-db", str(db)], capsys)
    assert code == 1 and out_text == ""
    assert err == (f"hase: error: no state store at {db}: the daemon has not run with this "
                   "store; pass the daemon's --config (its [schedd] state_db) or --state-db\n")
    assert not db.exists() and not db.parent.exists()


def test_reset_dry_run_on_an_existing_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_CONF", raising=False)
    db = tmp_path / "s.db"
    st = StateStore(db)
    st.record_cycle(CycleRow(5.0, 0.2, "hase", False, "d", 3, 1, 2, 2, 0, 0), [], {"9": (-50, "a100")})
    st.close()
    job = Job(job_id="9", name="j", user="u", account="a", partition="gpu",
              state=JobState.PENDING, nice=-50, features="a100")
    backend = FakeBackend([job])
    monkeypatch.setattr(schedd_cmd, "_backend", lambda: backend)
    out = CliRunner().invoke(cli, ["schedd", "reset", "--dry-run", "--state-db", str(db)])
    assert out.exit_code == 0, out.output
    assert out.output == "would run: scontrol update jobid=9 Nice=0 Features=\n1 jobs, 0 errors\n"
    assert backend.updates == []
    st = StateStore(db)
    assert "9" in st.owned()  # a dry run forgets nothing
    st.close()


def test_reset_reaches_a_job_moved_out_of_the_managed_partitions(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon manages partition gpu; job 9 got our Nice and Features there and was then
    moved to debug. It still carries them: reset puts them back (it was dropped as 'gone')."""
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.delenv("HASE_SCHEDD_CONFIG", raising=False)
    db = tmp_path / "s.db"
    st = StateStore(db)
    st.record_cycle(CycleRow(5.0, 0.2, "hase", False, "d", 3, 1, 2, 2, 0, 0), [], {"9": (-50, "a100")})
    st.close()
    config = tmp_path / "schedd.toml"
    config.write_text(f'[schedd]\nstate_db = "{db}"\npartitions = ["gpu"]\n')
    job = Job(job_id="9", name="j", user="u", account="a", partition="debug",
              state=JobState.PENDING, nice=-50, features="a100")
    backend = FakeBackend([job])
    monkeypatch.setattr(schedd_cmd, "_backend", lambda: backend)
    out = CliRunner().invoke(cli, ["schedd", "reset", "--config", str(config)])
    assert out.exit_code == 0, out.output
    assert backend.updates == [("9", JobUpdate(nice=0, features=""))]
    assert out.output.endswith("1 jobs, 0 errors\n")


def test_status_missing_store_uses_hase_error_prefix(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "none.db"
    code, out, err = _main(["schedd", "status", "--state-db", str(db)], capsys)
    assert code == 1 and out == ""
    assert err == (f"hase: error: no state store at {db}: the daemon has not run with this "
                   "store; pass the daemon's --config (its [schedd] state_db) or --state-db\n")
    assert not db.exists()


@pytest.mark.parametrize("command", [["status"], ["job", "9"], ["reset", "--dry-run"]])
def test_read_only_commands_leave_another_programs_database_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        command: list[str]) -> None:
    """`hase schedd status --state-db other.db` (an SQLite file of another program) printed
    "no cycles recorded yet" with exit 0 and wrote the store's tables into it; a 0-byte file
    became a 49 KB store."""
    import sqlite3

    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.setattr(schedd_cmd, "_backend", _no_backend)
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE foo (x)")
    conn.commit()
    conn.close()
    before = other.read_bytes()
    code, out, err = _main(["schedd", *command, "--state-db", str(other)], capsys)
    assert code == 1 and out == ""
    assert err.startswith(f"hase: error: {other} is an SQLite database of something else "
                          "(tables: foo), not a slurm-hase state store; nothing was written")
    assert other.read_bytes() == before
    empty = tmp_path / "empty.db"
    empty.touch()
    code, out, err = _main(["schedd", *command, "--state-db", str(empty)], capsys)
    assert code == 1 and err.startswith(f"hase: error: an empty file at {empty}: ")
    assert empty.stat().st_size == 0


def test_the_daemon_refuses_another_programs_database(tmp_path: Path) -> None:
    import sqlite3

    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE jobs (x)")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="not a slurm-hase state store"):
        StateStore(other)
    assert [r[0] for r in sqlite3.connect(other).execute(
        "SELECT name FROM sqlite_master")] == ["jobs"]


# -- 5: --cycles is not negative -------------------------------------------------------------

def _store_with_cycles(db: Path, n: int) -> None:
    st = StateStore(db)
    for i in range(n):
        st.record_cycle(CycleRow(5.0 + i, 0.2, "hase", False, f"d{i}", 3, 1, 2, 2, 0, 0), [], {})
    st.close()


def test_status_refuses_negative_cycles(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    _store_with_cycles(db, 3)
    out = CliRunner().invoke(cli, ["schedd", "status", "--cycles", "-3", "--state-db", str(db)])
    assert out.exit_code == 2 and "--cycles" in out.output and "-3" in out.output
    for n, want in ((0, 0), (2, 2)):
        out = CliRunner().invoke(cli, ["schedd", "status", "--json", "--cycles", str(n),
                                       "--state-db", str(db)])
        assert out.exit_code == 0, out.output
        assert len(json.loads(out.output)["cycles"]) == want


# -- 6: model.info nested in status --json -------------------------------------------------

def test_status_json_nests_model_info(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    st = StateStore(db)
    st.record_model("(bundled)", "abc123", {"meta_keys": ["a", "b"]})
    st.close()
    out = CliRunner().invoke(cli, ["schedd", "status", "--json", "--state-db", str(db)])
    assert out.exit_code == 0, out.output
    model = json.loads(out.output)["model"]
    assert model["info"] == {"meta_keys": ["a", "b"]}
    assert model["path"] == "(bundled)" and model["digest"] == "abc123"


def test_status_json_keeps_non_json_model_info_as_text(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    st = StateStore(db)
    st.db.table("model_versions").insert({"loaded_at": 1.0, "path": "m.json", "digest": "d",
                                          "info": "not json {"})
    st.close()
    out = CliRunner().invoke(cli, ["schedd", "status", "--json", "--state-db", str(db)])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["model"]["info"] == "not json {"


# -- 7: SLURM_CONF that names no file ----------------------------------------------------------

def test_check_slurm_conf(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\n")
    check_slurm_conf({})
    check_slurm_conf({"SLURM_CONF": str(conf)})
    with pytest.raises(ConfigError) as exc:
        check_slurm_conf({"SLURM_CONF": "/nonexistent.conf"})
    assert str(exc.value) == "SLURM_CONF=/nonexistent.conf: no such file"
    with pytest.raises(ConfigError, match=f"SLURM_CONF={tmp_path}: not a regular file"):
        check_slurm_conf({"SLURM_CONF": str(tmp_path)})
    with pytest.raises(ConfigError, match="SLURM_CONF is set but empty"):
        check_slurm_conf({"SLURM_CONF": ""})


@pytest.mark.parametrize("command", [["run", "--once", "--dry-run"], ["reset", "--dry-run"]])
def test_run_and_reset_refuse_missing_slurm_conf_at_once(
        command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SLURM_CONF", "/nonexistent.conf")
    monkeypatch.setattr(schedd_cmd, "_backend", _no_backend)
    db = tmp_path / "s.db"
    if command[0] == "reset":
        _store_with_cycles(db, 1)
    code, out, err = _main(["schedd", *command, "--state-db", str(db)], capsys)
    assert code == 2 and out == ""
    assert err == "hase: error: SLURM_CONF=/nonexistent.conf: no such file\n"
    assert db.exists() == (command[0] == "reset")  # run opened no store


def test_run_once_failure_is_a_typed_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_CONF", raising=False)
    backend = FakeBackend()
    backend.unavailable = True
    monkeypatch.setattr(schedd_cmd, "_backend", lambda: backend)
    cfg = tmp_path / "c.toml"
    cfg.write_text('[schedd]\nlog_format = "text"\nlog_level = "ERROR"\n')
    out = CliRunner().invoke(cli, ["schedd", "run", "--once", "--dry-run", "--config", str(cfg),
                                   "--state-db", str(tmp_path / "s.db")])
    assert isinstance(out.exception, SlurmError)
    assert str(out.exception) == ("no cycle completed: squeue... exited 1: Unable to contact "
                                  "slurm controller (connect failure)")


def test_status_reads_the_services_config_without_config(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """`hase schedd status` with no --config reads /etc/slurm-hase/schedd.toml when it exists
    (the file render-unit's service runs with), so it finds the daemon's state_db; then
    HASE_SCHEDD_CONFIG, then --config win over it."""
    db = tmp_path / "site.db"
    StateStore(db).close()
    site = tmp_path / "schedd.toml"
    site.write_text(f'[schedd]\nstate_db = "{db}"\n[policy]\nname = "hase"\n')
    monkeypatch.setattr(schedd_cmd, "DEFAULT_CONFIG", str(site))
    monkeypatch.delenv("HASE_SCHEDD_CONFIG", raising=False)
    out = CliRunner().invoke(cli, ["schedd", "status", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["state_db"] == str(db)
    assert json.loads(out.output)["policy"] == "hase"
    other = tmp_path / "other.toml"
    other.write_text(f'[schedd]\nstate_db = "{tmp_path / "none.db"}"\n')
    by_env = CliRunner().invoke(cli, ["schedd", "status"], env={"HASE_SCHEDD_CONFIG": str(other)})
    assert isinstance(by_env.exception, StoreError)
    assert str(by_env.exception).startswith(f"no state store at {tmp_path / 'none.db'}:")
    by_option = CliRunner().invoke(cli, ["schedd", "status", "--json", "--config", str(site)],
                                   env={"HASE_SCHEDD_CONFIG": str(other)})
    assert json.loads(by_option.output)["state_db"] == str(db)
    monkeypatch.setattr(schedd_cmd, "DEFAULT_CONFIG", str(tmp_path / "absent.toml"))
    defaults = CliRunner().invoke(cli, ["schedd", "status", "--json", "--state-db", str(db)])
    assert json.loads(defaults.output)["policy"] == DaemonConfig().policy != "hase"
