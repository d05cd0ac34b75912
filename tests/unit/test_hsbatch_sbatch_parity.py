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
from slurm_hase.predict.descriptor import WorkloadDescriptor
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
    # the same but for the constraint and its record ("at") in the description
    plain = [a for a in first if not a.startswith(("--constraint=", "--comment="))]
    assert [a for a in second if not a.startswith("--comment=")] == plain
    assert "sbatch refused the job with the GPU-type constraint hsbatch added" in r.err


def _comment_of(argv: list[str]) -> WorkloadDescriptor:
    found = [a.removeprefix("--comment=") for a in argv if a.startswith("--comment=")]
    return WorkloadDescriptor.from_comment(found[0])


def test_the_retry_does_not_record_the_constraint_it_dropped(tmp_path: Path) -> None:
    """Job 58 on the local cluster (-N5, retried) had Features=(null) but Comment ... "at":"a100":
    a constraint the user sets later would then be taken for hsbatch's and changed by the
    daemon. The retried job's description records no constraint."""
    r = hsbatch(["-N5", "--gpus-per-node=1", script(tmp_path, DESC)],
                runner=RefusesConstraints())
    (first, _), (second, _) = r.calls
    assert _comment_of(first).auto_types and not _comment_of(second).auto_types
    assert _comment_of(second).model == "resnet50"


@pytest.mark.parametrize("stderr", [
    "sbatch: error: Batch job submission failed: Invalid account or account/partition "
    "combination specified\n",
    "sbatch: error: Batch job submission failed: Job violates accounting/QOS policy (job "
    "submit limit, user's size and/or time limits)\n",
])
def test_a_refusal_the_constraint_did_not_cause_is_not_submitted_again(
        tmp_path: Path, stderr: str) -> None:
    """'hsbatch -A nosuchacct ...' ran sbatch twice (each leaving a FAILED job in sacct) and
    blamed the constraint; sbatch refuses that job without it too: one call, its error as is."""
    refused = FakeRunner(CommandResult(("sbatch",), 1, "", stderr))
    r = hsbatch(["-A", "nosuchacct", "--gpus=1", script(tmp_path, DESC)], runner=refused)
    assert _added_constraint(r.calls[0][0]) is not None
    assert (r.code, r.out, r.err, len(r.calls)) == (1, "", stderr, 1)


@pytest.mark.parametrize("hold", [["--hold"], ["-H"], ["--hol"]])
def test_a_held_job_gets_no_constraint(tmp_path: Path, hold: list[str]) -> None:
    """sbatch 22.05 takes '--hold -N5 --gpus-per-node=1' without checking node configuration
    (Features=a100 with 2 a100 nodes was accepted; released, it stayed PENDING for ever while
    the same job from sbatch ran). Held jobs get no GPU-type constraint; the daemon routes them."""
    r = hsbatch([*hold, "-N5", "--gpus-per-node=1", "--hase-explain", script(tmp_path, DESC)])
    (argv, _), = r.calls
    assert _added_constraint(argv) is None, argv
    assert "held job" in r.err


def test_a_held_job_by_directive_gets_no_constraint(tmp_path: Path) -> None:
    r = hsbatch(["--gpus=1", script(tmp_path, "#SBATCH -H\n" + DESC)])
    assert _added_constraint(r.calls[0][0]) is None


def test_slurm_clusters_in_the_environment_is_multi_cluster(tmp_path: Path) -> None:
    """sbatch(1): 'SBATCH_CLUSTERS or SLURM_CLUSTERS: same as --clusters'; only the first
    counted, so a job sent to another cluster got this cluster's types as a constraint."""
    s = script(tmp_path, DESC)
    for name in ("SBATCH_CLUSTERS", "SLURM_CLUSTERS"):
        r = hsbatch(["-G", "1", s], env={name: "c2"})
        assert _added_constraint(r.calls[0][0]) is None, name


@pytest.mark.parametrize("limit", ["0", "0:0", "0-0"])
def test_a_time_limit_of_zero_is_no_limit(tmp_path: Path, limit: str) -> None:
    """sbatch(1): 'A time limit of zero requests that no time limit be imposed' (scontrol shows
    TimeLimit=UNLIMITED). hsbatch read 0 s: a false 'no GPU type here can run this job' warning,
    and no constraint."""
    r = hsbatch(["-t", limit, "--gpus=1", script(tmp_path, DESC)])
    assert "no GPU type here can run" not in r.err, r.err
    assert _added_constraint(r.calls[0][0]) is not None


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
