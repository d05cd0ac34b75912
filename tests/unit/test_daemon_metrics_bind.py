"""The /metrics endpoint refuses to start with a ConfigError naming `[schedd.metrics] port` or
`address`, and the textfile's folder is created only when asked."""

from __future__ import annotations

import socket
import urllib.request
from pathlib import Path

import pytest

from slurm_hase.daemon.metrics import Metrics, serve_metrics
from slurm_hase.errors import ConfigError


def test_a_port_in_use_names_the_port(busy_port: int) -> None:
    with pytest.raises(ConfigError) as exc:
        serve_metrics(Metrics(), "127.0.0.1", busy_port)
    assert str(exc.value) == (f"[schedd.metrics] port: 127.0.0.1:{busy_port} is already in use by "
                              "another process; choose a free port (0 turns the endpoint off)")


def test_an_unresolvable_host_names_the_address() -> None:
    with pytest.raises(ConfigError, match=r"^\[schedd\.metrics\] address: cannot resolve "
                                          r"'no-such-host\.invalid' \("):
        serve_metrics(Metrics(), "no-such-host.invalid", 0)


def test_an_address_of_another_host_names_the_address() -> None:
    # 192.0.2.0/24 is TEST-NET-1 (RFC 5737): never an address of this host
    with pytest.raises(ConfigError) as exc:
        serve_metrics(Metrics(), "192.0.2.1", 0)
    assert str(exc.value) == "[schedd.metrics] address: '192.0.2.1' is not an address of this host"


def test_ipv6_literal_is_served() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this host")
    m = Metrics()
    m.set("hase_schedd_running_jobs", 2)
    try:
        server = serve_metrics(m, "::1", 0)
    except ConfigError as exc:  # IPv6 built in but ::1 not configured (some containers)
        pytest.skip(f"::1 not usable here: {exc}")
    try:
        url = f"http://[::1]:{server.server_address[1]}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - local test server
            assert "hase_schedd_running_jobs 2" in resp.read().decode()
    finally:
        server.shutdown()


def test_textfile_folder_is_not_created_when_told(tmp_path: Path) -> None:
    target = tmp_path / "typo" / "hase.prom"
    with pytest.raises(FileNotFoundError):
        Metrics().write_textfile(target, make_parents=False)
    assert not target.parent.exists()
    target.parent.mkdir()
    Metrics().write_textfile(target, make_parents=False)
    assert target.read_text() == "\n"
