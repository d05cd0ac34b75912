"""TOML's inf and nan in a number field are refused as not finite, naming the key. Before, the
message read "[policy.knobs] theta: inf is out of range [-inf, inf]" (or "[1, inf]" for
half_life_s = inf), a range that seems to hold the value."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hase.daemon.config import load_config
from slurm_hase.errors import ConfigError


@pytest.mark.parametrize(("text", "expected"), [
    ("[policy.knobs]\ntheta = inf\n", "[policy.knobs] theta: must be a finite number, got inf"),
    ("[schedd]\nhalf_life_s = inf\n", "[schedd] half_life_s: must be a finite number, got inf"),
    ("[schedd]\ninterval_s = nan\n", "[schedd] interval_s: must be a finite number, got nan"),
    ("[shares]\nteama = -inf\n", "[shares] teama: must be a finite number, got -inf"),
])
def test_inf_and_nan_are_refused_as_not_finite(tmp_path: Path, text: str, expected: str) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_config(cfg)
    assert str(exc.value) == expected
