"""Daemon config: messages that name the key, [schedd.metrics] address/port checks, files that
are not UTF-8."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hase.daemon.config import check_address, from_mapping, load_config
from slurm_hase.errors import ConfigError


@pytest.mark.parametrize(("doc", "message"), [
    ({"policy": {"name": "fair", "knobz": {"a": 1}}},
     "unknown key 'knobz' in [policy] (keys: name, knobs)"),
    ({"schedd": {"metrics": {"prot": 9100}}},
     "unknown key 'prot' in [schedd.metrics] (keys: textfile, port, address)"),
    ({"policy": 3}, "[policy] must be a table"),
    ({"schedd": "x"}, "[schedd] must be a table"),
    ({"shares": [1]}, "[shares] must be a table"),
    ({"schedd": {"metrics": 9100}}, "[schedd.metrics] must be a table (keys: textfile, port, address)"),
    ({"schedd": {"metrics": {"port": 9100.5}}}, "[schedd.metrics] port: must be a whole number, got 9100.5"),
])
def test_messages_name_the_key(doc: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        from_mapping(doc)
    assert str(exc.value) == message


@pytest.mark.parametrize("address", ["not an address", "bad_host", "-lead.example", "a..b",
                                     "10.0.0.1:9100", "x" * 64, "http://127.0.0.1"])
def test_metrics_address_syntax_is_checked(address: str) -> None:
    with pytest.raises(ConfigError, match=r"^\[schedd\.metrics\] address: .* is not an IP address "
                                          "or host name"):
        from_mapping({"schedd": {"metrics": {"address": address}}})


@pytest.mark.parametrize("address", ["127.0.0.1", "0.0.0.0", "::1", "::", "localhost",  # noqa: S104
                                     "node-01.cluster.example", "metrics.example.", ""])
def test_metrics_addresses_that_are_fine(address: str) -> None:
    assert check_address(address) == address
    cfg = from_mapping({"schedd": {"metrics": {"address": address, "port": 9100}}})
    assert cfg.metrics_address == address and cfg.metrics_port == 9100


def test_a_config_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "bin.toml"
    path.write_bytes(b'[schedd]\ninterval_s = 60 # \xff\xfe\n')
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    assert str(exc.value) == (f"config {path}: not UTF-8 text (byte 0xff at offset 27); "
                              "TOML files are UTF-8")
