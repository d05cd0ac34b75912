"""Shared test fixtures."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
SHARED_DATA = REPO.parent / "shared" / "data"


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run the real `hase` entry point: (exit code, stdout, stderr)."""
    from slurm_hase.cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(argv)
        raise SystemExit(0)
    out = capsys.readouterr()
    code = exc.value.code
    return (code if isinstance(code, int) else 1), out.out, out.err


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data beside the checkout; skips with a reason in a plain clone."""
    if not (SHARED_DATA / "MANIFEST.tsv").is_file():
        pytest.skip(f"needs ../shared/data (not present at {SHARED_DATA}; only in the team workspace)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture()
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run in UTC: the Slurm captures were taken on UTC machines, and --since/--until forms
    and the times shown to people are local."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture()
def in_zone(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    """Call with a zone name (``Europe/Berlin``) to run this process in that time zone (TZ and
    time.tzset()); the zone before is back after the test."""

    def enter(zone: str) -> None:
        monkeypatch.setenv("TZ", zone)
        time.tzset()

    yield enter
    monkeypatch.undo()
    time.tzset()


def slurm_capture(fixtures: Path, version: str, name: str) -> str:
    """A real captured Slurm output file from tests/fixtures/slurm/<version>/."""
    return (fixtures / "slurm" / version / name).read_text()


@pytest.fixture()
def busy_port() -> Iterator[int]:
    """A port another socket is listening on."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    try:
        yield int(sock.getsockname()[1])
    finally:
        sock.close()
