"""Daemon config: the example validates; unknown policy/GPU type/key is refused at start."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hase.daemon.config import from_mapping, load_config
from slurm_hase.daemon.unit import render_unit
from slurm_hase.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def test_example_config_is_valid() -> None:
    cfg = load_config(REPO / "templates" / "schedd.toml.example")
    assert cfg.policy == "fair" and cfg.partitions == ("gpu",)
    assert cfg.knobs == {"theta": 0.2} and cfg.interval_s == 60.0


def test_defaults_without_file() -> None:
    cfg = load_config(None)
    assert cfg.policy == "fair" and cfg.partitions is None and not cfg.dry_run


def test_refresh_s_is_read_and_defaults_as_the_cycle_does() -> None:
    from slurm_hase.daemon.cycle import CycleConfig

    assert from_mapping({"schedd": {"refresh_s": 0}}).refresh_s == 0.0
    assert load_config(None).refresh_s == CycleConfig().refresh_s == 600.0


def test_begin_horizon_s_is_read_and_defaults_as_the_cycle_does() -> None:
    from slurm_hase.daemon.cycle import CycleConfig

    assert from_mapping({"schedd": {"begin_horizon_s": 60}}).begin_horizon_s == 60.0
    assert load_config(None).begin_horizon_s == CycleConfig().begin_horizon_s == 300.0
    with pytest.raises(ConfigError, match="begin_horizon_s"):
        from_mapping({"schedd": {"begin_horizon_s": -1}})


def test_requeue_overhead_s_is_read_and_defaults_as_the_simulator_does() -> None:
    from slurm_hase.sim.engine import SimConfig

    assert from_mapping({"schedd": {"requeue_overhead_s": 30}}).requeue_overhead_s == 30.0
    assert load_config(None).requeue_overhead_s == SimConfig().requeue_overhead_s == 120.0
    with pytest.raises(ConfigError, match="requeue_overhead_s"):
        from_mapping({"schedd": {"requeue_overhead_s": -5}})


def test_nice_range_fits_slurms_limit_at_the_edge() -> None:
    assert from_mapping({"schedd": {"nice_scale": 21_474}}).nice_scale == 21_474
    assert from_mapping({"schedd": {"nice_scale": 42_949, "nice_zero": 50_000}}).nice_zero == 50_000
    with pytest.raises(ConfigError, match="nice_scale 42950 x nice_zero 50000"):
        from_mapping({"schedd": {"nice_scale": 42_950, "nice_zero": 50_000}})


@pytest.mark.parametrize(("doc", "match"), [
    ({"policy": {"name": "round-robin"}}, "unknown policy 'round-robin'"),
    ({"policy": {"name": "hase", "knobs": {"bta": 0.5}}}, "no knob 'bta'"),
    ({"schedd": {"gpu_types": ["a100", "z9000"]}}, "unknown GPU type 'z9000'"),
    ({"schedd": {"intervall_s": 5}}, "unknown key"),
    ({"schedd": {"interval_s": 0}}, "interval_s"),
    ({"schedd": {"interval_s": "5"}}, "must be a number"),
    ({"schedd": {"refresh_s": -1}}, "refresh_s: -1 is out of range"),
    ({"schedd": {"partitions": ["gpu; rm -rf /"]}}, "plain names"),
    ({"schedd": {"metrics": {"textfile": "/tmp/x.txt"}}}, "\\.prom"),
    ({"shares": {"acct": -1}}, "out of range"),
    ({"polcy": {}}, "unknown section"),
    # levels would reach Nice -100000 x 30000 = -3e9, beyond Slurm's +-2147483645
    ({"schedd": {"nice_scale": 30_000}}, "nice_scale needs to be at most 21474"),
    ({"schedd": {"backoff_s": 60, "backoff_max_s": 30}}, r"backoff_max_s \(30\) is below backoff_s"),
    ({"schedd": {"backoff_s": 600}}, r"backoff_max_s \(300, the default\) is below backoff_s \(600\)"),
])
def test_bad_configs_are_refused(doc: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        from_mapping(doc)


def test_unreadable_and_broken_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[schedd\ninterval_s = 3\n")
    with pytest.raises(ConfigError, match="bad.toml"):
        load_config(bad)


def test_render_unit(tmp_path: Path) -> None:
    text = render_unit(config_path=str(tmp_path / "s.toml"), exec_start="/opt/hase/bin/hase",
                       slurm_conf="/etc/slurm/slurm.conf")
    assert f"ExecStart=/opt/hase/bin/hase schedd run --config {tmp_path / 's.toml'}" in text
    assert "Environment=SLURM_CONF=/etc/slurm/slurm.conf" in text
    assert "[Install]" in text and "{{" not in text
    with pytest.raises(ConfigError, match="unit file"):
        render_unit(config_path="x", user="root\nExecStartPre=/bin/evil")


def test_render_unit_documentation_points_at_a_file_that_exists(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Documentation= names daemon.md where this installation has it (the source tree here,
    share/doc/slurm-hase in an installed one), and is left out where it has none."""
    from urllib.parse import unquote

    from slurm_hase.daemon import unit

    text = render_unit(config_path=str(tmp_path / "s.toml"))
    line = next(x for x in text.splitlines() if x.startswith("Documentation="))
    assert Path(unquote(line.removeprefix("Documentation=file://"))).is_file()
    installed = tmp_path / "share" / "doc" / "slurm-hase"
    installed.mkdir(parents=True)
    (installed / "daemon.md").write_text("# daemon\n")
    monkeypatch.setattr(unit, "docs_dirs", lambda: [tmp_path / "no-checkout", installed])
    assert f"Documentation=file://{installed / 'daemon.md'}\n" in render_unit(config_path="s.toml")
    monkeypatch.setattr(unit, "docs_dirs", lambda: [tmp_path / "nowhere"])
    bare = render_unit(config_path="s.toml")
    assert "Documentation=" not in bare
    assert "Description=slurm-hase scheduler daemon (hardware-aware, fair GPU placement)\n" \
           "After=network-online.target" in bare
