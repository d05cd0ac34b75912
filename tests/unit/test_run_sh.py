"""run.sh (the README's two commands) names modules that exist."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_python_module_run_sh_starts_exists() -> None:
    text = (REPO / "run.sh").read_text()
    modules = re.findall(r"python\"? -m ([A-Za-z_][\w.]*)", text)
    assert "slurm_hase.cli.demo" in modules  # `./run.sh demo`, the README's main job
    for name in modules:
        assert importlib.util.find_spec(name) is not None, f"run.sh runs a missing module {name}"
