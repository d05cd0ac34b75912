"""hsbatch's sbatch option table against the real sbatch of each release (22.05 on bookworm,
24.11 on trixie): every name of it is one sbatch knows, but for the names sbatch 22.05 lacks,
which it must not know there; and an abbreviation whose meaning the release decides (`--ext`:
--extra-node-info on 22.05, ambiguous with --extra on 24.11) is read as that sbatch reads it."""

from __future__ import annotations

import re
import string
import subprocess
from pathlib import Path

import pytest

from slurm_hase.hsbatch.sbatch_opts import (
    ALIASES,
    LONG_OPTIONS,
    SHORT_REQUIRED,
    SHORT_TO_LONG,
    SINCE_23,
    UNTIL_23_11,
    resolve_for,
)
from slurm_hase.slurm.command_backend import CommandBackend
from tests.integration.test_hsbatch_parity_live import BEGIN, DESC, HSBATCH, _field, _script

pytestmark = pytest.mark.slurm


def _knows(env: dict[str, str], name: str) -> bool:
    """Whether this sbatch's getopt knows --NAME (a test-only submission: nothing queued)."""
    res = subprocess.run(["sbatch", f"--{name}=1", "--wrap=true", "--test-only"], env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    return "unrecognized option" not in res.stderr


def test_every_name_of_the_table_is_this_sbatchs(slurm_env: dict[str, str],
                                                 slurm_backend: CommandBackend) -> None:
    """Each name means something to this sbatch exactly when hsbatch's table for its release
    resolves it: itself, or on 22.05 a name it lacks that abbreviates one it has (--extra is
    --extra-node-info there), the others unrecognized (--segment on 22.05, --power on 24.11:
    this test found that one)."""
    version = slurm_backend.version_tuple()
    meant = {name: resolve_for(name, lambda: version) for name in sorted(LONG_OPTIONS)}
    assert all(meant[n] == ALIASES.get(n, n) for n in LONG_OPTIONS
               if n not in SINCE_23 | UNTIL_23_11)
    if version < (23, 0):
        assert meant["extra"] == "extra-node-info" and meant["segment"] is None
        assert meant["power"] == "power"
    else:
        assert meant["power"] is None and meant["segment"] == "segment"
    wrong = [name for name, full in meant.items() if _knows(slurm_env, name) != (full is not None)]
    assert wrong == [], f"sbatch {slurm_backend.version()} disagrees on {wrong}"


def test_an_abbreviation_is_read_as_this_sbatch_reads_it(
        slurm_env: dict[str, str], slurm_backend: CommandBackend, tmp_path: Path) -> None:
    """`hsbatch --ext 4 job.sh`: on 22.05 the 4 is --extra-node-info's, job.sh the script and
    its #HASE description read; on 24.11 sbatch refuses the ambiguous --ext, as hsbatch does."""
    script = _script(tmp_path, DESC)
    argv = [BEGIN, "-G", "1", "--ext", "4", script]
    sb = subprocess.run(["sbatch", *argv], env=slurm_env, capture_output=True, text=True,
                        timeout=120, check=False)
    hs = subprocess.run([*HSBATCH, *argv], env=slurm_env, cwd=tmp_path, capture_output=True,
                        text=True, timeout=120, stdin=subprocess.DEVNULL, check=False)
    ids = re.findall(r"Submitted batch job (\d+)", sb.stdout + hs.stdout)
    try:
        assert hs.returncode == sb.returncode, (sb.stderr, hs.stderr)
        if slurm_backend.version_tuple() < (23, 0):
            assert sb.returncode == 0 and len(ids) == 2
            assert '"model":"resnet50"' in _field(slurm_env, ids[1], "Comment"), hs.stderr
        else:
            assert sb.returncode != 0 and "ambiguous" in sb.stderr and ids == []
    finally:
        if ids:
            subprocess.run(["scancel", *ids], env=slurm_env, capture_output=True, check=False)


def test_every_short_option_takes_a_value_where_this_sbatch_wants_one(
        slurm_env: dict[str, str]) -> None:
    """`sbatch -L` alone says 'requires an argument' exactly for the letters the table gives a
    value (-q, --qos, was missing: `-q normal job.sh` made 'normal' the script); a letter sbatch
    does not know is not in the table."""
    wrong = []
    for letter in string.ascii_letters:
        res = subprocess.run(["sbatch", f"-{letter}"], env=slurm_env, capture_output=True,
                             text=True, timeout=60, check=False, stdin=subprocess.DEVNULL)
        wants_value = "requires an argument" in res.stderr
        known = "invalid option" not in res.stderr
        if wants_value != (letter in SHORT_REQUIRED) or known != (letter in SHORT_TO_LONG):
            wrong.append(letter)
    assert wrong == []
