"""hsbatch against sbatch 22.05: differences found by differential testing (no Slurm needed).

Each test states what the real sbatch 22.05.8 does (checked on the local cluster) and asserts
that hsbatch behaves the same way. They fail while the bug is present.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from slurm_hase.hsbatch.sbatch_opts import scan
from slurm_hase.slurm.runner import CommandResult
from tests.unit.test_hsbatch_core import FakeRunner, hsbatch, script

DESC = "#HASE model=resnet50 iterations=100000\n"


def _added_constraint(argv: list[str]) -> str | None:
    found = [a.removeprefix("--constraint=") for a in argv if a.startswith("--constraint=")]
    return found[0] if found else None


def _types_of(constraint: str) -> set[str]:
    return set(constraint.split("|"))


# --- 1. '#SBATCH--opt' (no blank after the magic word) is a directive for sbatch -------------

def test_directive_without_blank_after_magic_keeps_users_constraint_and_comment(
        tmp_path: Path) -> None:
    """sbatch 22.05 treats every line starting with '#SBATCH' as a directive: a job with
    '#SBATCH--constraint=t4' and '#SBATCH--comment=mine' runs with Features=t4 Comment=mine.
    hsbatch does not see them and puts --constraint=a100|v100 and --comment=<json> on the
    command line, which overrides both."""
    s = script(tmp_path, "#SBATCH--constraint=t4\n#SBATCH--comment=mine\n" + DESC)
    r = hsbatch(["-G", "1", s])
    argv = r.calls[0][0]
    assert _added_constraint(argv) is None, argv
    assert not any(a.startswith("--comment=") for a in argv), argv


def test_directive_without_blank_after_magic_partition(tmp_path: Path) -> None:
    """'#SBATCH--partition=debug' puts the job in debug (t4 only); hsbatch judges the default
    partition and adds a constraint naming types debug does not have, so sbatch then refuses
    the job ('Requested node configuration is not available')."""
    s = script(tmp_path, "#SBATCH--partition=debug\n" + DESC)
    r = hsbatch(["-G", "1", s])
    c = _added_constraint(r.calls[0][0])
    assert c is None or _types_of(c) <= {"t4"}, c


# --- 2. #PBS directives (sbatch honours them unless --ignore-pbs) ---------------------------

def test_pbs_queue_directive_selects_the_partition(tmp_path: Path) -> None:
    """'#PBS -q debug' makes sbatch submit to partition debug (t4 only). hsbatch ignores #PBS
    lines, judges partition gpu and adds --constraint=a100|v100: the job is refused."""
    s = script(tmp_path, "#PBS -q debug\n" + DESC)
    r = hsbatch(["-G", "1", s])
    c = _added_constraint(r.calls[0][0])
    assert c is None or _types_of(c) <= {"t4"}, c


# --- 3. the added constraint can leave the job no nodes at all ------------------------------

def test_added_constraint_respects_excluded_nodes(tmp_path: Path) -> None:
    """sbatch accepts '-G 1 -x a100-[1-2],v100-[1-2]' (t4 nodes remain). hsbatch adds
    --constraint=a100|v100, which with the exclusion leaves no node: sbatch refuses."""
    s = script(tmp_path, DESC)
    r = hsbatch(["-G", "1", "-x", "a100-1,a100-2,v100-1,v100-2", s])
    c = _added_constraint(r.calls[0][0])
    assert c is None or "t4" in _types_of(c), c


REFUSAL = ("sbatch: error: Batch job submission failed: Requested node configuration is not "
           "available\n")


@dataclass
class RefusesConstraints(FakeRunner):
    """sbatch as Slurm answers when the GPU-type constraint leaves the job too few nodes."""

    def run(self, argv: Sequence[str], *, stdin: str | None = None,
            env: Mapping[str, str] | None = None, timeout_s: float = 60.0,
            cwd: str | None = None) -> CommandResult:
        self.calls.append((list(argv), stdin))
        if _added_constraint(list(argv)) is not None:
            return CommandResult(tuple(argv), 1, "", REFUSAL)
        return CommandResult(tuple(argv), 0, "Submitted batch job 7\n", "")


@pytest.mark.parametrize("request_args", [["--gpus=12"], ["-N5", "--gpus-per-node=1"],
                                          ["-n", "40", "--gpus=1"]])
def test_a_job_the_added_constraint_leaves_no_room_is_submitted_without_it(
        tmp_path: Path, request_args: list[str]) -> None:
    """sbatch accepts '--gpus=12', '-N5 --gpus-per-node=1' and '-n 40 --gpus=1' on the 6-node,
    24-GPU cluster; with hsbatch's constraint (a100, or a100|v100: 2 or 4 nodes) Slurm refuses
    them. hsbatch then submits once more without its constraint: the job is not lost."""
    s = script(tmp_path, DESC)
    r = hsbatch([*request_args, s], runner=RefusesConstraints())
    assert r.code == 0 and r.out == "Submitted batch job 7\n", r.err
    (first, _), (second, _) = r.calls
    assert _added_constraint(first) is not None and _added_constraint(second) is None
    assert [a for a in first if not a.startswith("--constraint=")] == second
    assert "sbatch refused the job with the GPU-type constraint hsbatch added" in r.err


def test_a_refusal_without_hsbatchs_constraint_is_relayed_as_it_is(tmp_path: Path) -> None:
    """No constraint of hsbatch's (the user's own, or none): sbatch's refusal is the answer."""
    refused = FakeRunner(CommandResult(("sbatch",), 1, "", REFUSAL))
    s = script(tmp_path, "#SBATCH --constraint=a100\n" + DESC)
    r = hsbatch(["--gpus=12", s], runner=refused)
    assert (r.code, r.out, r.err) == (1, "", REFUSAL) and len(r.calls) == 1


# --- 4. sbatch's output is relayed as text, strictly decoded and newline-translated --------

FAKE_SBATCH = r"""#!/bin/sh
printf 'Submitted batch job 5\n'
printf 'sbatch: job-name            : caf\351\n' >&2
printf 'sbatch: job-name            : a\rb\n' >&2
exit 0
"""


@pytest.fixture()
def fake_sbatch(tmp_path: Path) -> Path:
    p = tmp_path / "sbatch"
    p.write_text(FAKE_SBATCH)
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return p


def test_sbatch_output_is_relayed_byte_for_byte(fake_sbatch: Path) -> None:
    """'sbatch -v -J $'caf\\xe9' ...' submits the job and prints the name's bytes on stderr.
    hsbatch decodes sbatch's output strictly as UTF-8: UnicodeDecodeError traceback, exit 1,
    and the 'Submitted batch job N' line is lost although the job was submitted. A '\\r' in
    the output (e.g. -J $'a\\rb' -v) comes out as '\\n'."""
    expected = subprocess.run([str(fake_sbatch)], capture_output=True, check=False)
    env = dict(os.environ, HSBATCH_SBATCH=str(fake_sbatch))
    got = subprocess.run([sys.executable, "-m", "slurm_hase.hsbatch.cli", "--wrap", "true"],
                         capture_output=True, env=env, stdin=subprocess.DEVNULL, check=False,
                         cwd=Path(__file__).resolve().parents[2])
    assert got.returncode == expected.returncode == 0, got.stderr[-300:]
    assert got.stdout == expected.stdout
    assert got.stderr == expected.stderr


# --- 5. option names sbatch 22.05 knows but hsbatch's table gets wrong ---------------------

def test_cluster_alias_and_license_prefix_take_a_value() -> None:
    """sbatch 22.05 accepts '--cluster' (alias of --clusters) and '--licen'/'--lic' (prefixes of
    both --license and --licenses, which getopt does not find ambiguous): each takes a value.
    hsbatch's scanner calls them unknown flags, so the value is taken for the script."""
    for argv in (["--cluster", "hase", "job.sh"], ["--lic", "foo:1", "job.sh"]):
        sc = scan(argv)
        assert sc.script_index == 2, (argv, sc.opts)


def test_multi_cluster_alias_gets_no_type_constraint(tmp_path: Path) -> None:
    """docs/hsbatch.md: no GPU-type constraint for multi-cluster jobs. With '--cluster=c2'
    (sbatch's alias of --clusters) hsbatch still adds one from the local cluster's types."""
    s = script(tmp_path, DESC)
    r = hsbatch(["--cluster=c2", "-G", "1", s])
    assert _added_constraint(r.calls[0][0]) is None
