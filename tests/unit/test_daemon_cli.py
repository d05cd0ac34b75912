"""`hase schedd` CLI: policies, status, render-unit, config refusal at start."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from slurm_hase.cli.main import cli
from slurm_hase.errors import ConfigError, StoreError
from slurm_hase.store.state import CycleRow, StateStore


def test_policies_lists_all_four() -> None:
    out = CliRunner().invoke(cli, ["schedd", "policies"])
    assert out.exit_code == 0
    assert [line.split()[0] for line in out.output.splitlines()] == ["fair", "fifo", "gavel", "hase"]


def test_policies_json_gives_each_policy_its_knob_defaults() -> None:
    out = CliRunner().invoke(cli, ["schedd", "policies", "--json"])
    assert out.exit_code == 0, out.output
    doc = {p["name"]: p for p in json.loads(out.output)}
    assert sorted(doc) == ["fair", "fifo", "gavel", "hase"]
    assert doc["fair"]["knobs"]["theta"] == 0.2 and doc["fair"]["knobs"]["floor"] == 0.0
    assert doc["fair"]["summary"]


def test_status_json(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    st = StateStore(db)
    st.record_cycle(CycleRow(5.0, 0.2, "hase", False, "d", 3, 1, 2, 2, 0, 0), [], {"9": (5, "a100")})
    st.close()
    out = CliRunner().invoke(cli, ["schedd", "status", "--json", "--state-db", str(db)])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["owned_jobs"] == 1 and data["cycles"][0]["policy"] == "hase"
    assert data["last_observed"] is None
    # the config's policy (the default, fair) is not what the daemon ran: both are given
    assert data["policy"] == "fair" and data["last_cycle_policy"] == "hase"
    text = CliRunner().invoke(cli, ["schedd", "status", "--state-db", str(db), "--cycles", "0"]).output
    assert "note: the last recorded cycle ran policy hase, not the config's fair" in text
    st = StateStore(db)
    st.save_usage({"half_life_s": 60.0, "usage": {}}, 1000.0)
    st.save_usage({"half_life_s": 60.0, "usage": {}}, 1060.0)  # a quiet cycle's snapshot
    st.close()
    data = json.loads(CliRunner().invoke(
        cli, ["schedd", "status", "--json", "--state-db", str(db)]).output)
    assert data["last_observed"] == 1060.0
    text = CliRunner().invoke(cli, ["schedd", "status", "--state-db", str(db)]).output
    assert "last observed Slurm:" in text and "refresh_s" in text
    # `status --help` and docs/daemon.md promise the model in use; only --json had it
    assert "model: none recorded yet" in text
    st = StateStore(db)
    st.record_model("/etc/slurm-hase/site.json", "ab" * 32, {"trees": 3})
    st.close()
    text = CliRunner().invoke(cli, ["schedd", "status", "--state-db", str(db)]).output
    assert "model: /etc/slurm-hase/site.json (sha256 abababababab, loaded " in text
    missing = CliRunner().invoke(cli, ["schedd", "status", "--state-db", str(tmp_path / "no.db")])
    assert isinstance(missing.exception, StoreError) and "no state store" in str(missing.exception)


def test_run_refuses_unknown_policy_before_touching_slurm(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[policy]\nname = "magic"\n')
    out = CliRunner().invoke(cli, ["schedd", "run", "--once", "--config", str(cfg)])
    assert isinstance(out.exception, ConfigError) and "unknown policy 'magic'" in str(out.exception)
    cfg.write_text('[schedd]\ngpu_types = ["a100", "quantum9"]\n')
    out = CliRunner().invoke(cli, ["schedd", "run", "--once", "--config", str(cfg)])
    assert isinstance(out.exception, ConfigError) and "quantum9" in str(out.exception)


def test_render_unit_cli(tmp_path: Path) -> None:
    target = tmp_path / "hase-schedd.service"
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\n")
    out = CliRunner().invoke(cli, ["schedd", "render-unit", "--exec", "/usr/bin/hase",
                                   "--slurm-conf", str(conf), "-o", str(target)])
    assert out.exit_code == 0, out.output
    assert f"Environment=SLURM_CONF={conf}\n" in target.read_text()
    assert "ExecStart=/usr/bin/hase schedd run --config /etc/slurm-hase/schedd.toml" in target.read_text()
