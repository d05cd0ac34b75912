"""Shell completion (click's, docs/install.md): `hase sch<TAB>` and `hase schedd r<TAB>`
complete through the lazily loaded command groups, as bash asks for them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def _complete(words: str, cword: int) -> list[str]:
    argv = [str(Path(sys.executable).with_name("hase"))]  # the installed console script
    env = {**os.environ, "COMP_WORDS": words, "COMP_CWORD": str(cword),
           "_HASE_COMPLETE": "bash_complete"}
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60,  # noqa: S603
                         check=True).stdout
    return [line.split(",", 1)[1] for line in out.splitlines()]


def test_commands_and_options_complete() -> None:
    assert _complete("hase sch", 1) == ["schedd"]
    assert _complete("hase schedd r", 2) == ["render-unit", "reset", "run"]
    assert _complete("hase report usage --us", 3) == ["--user"]
