"""Shared test fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data beside the checkout; skips with a reason in a plain clone."""
    if not (SHARED_DATA / "MANIFEST.tsv").is_file():
        pytest.skip(f"needs ../shared/data (not present at {SHARED_DATA}; only in the team workspace)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES
