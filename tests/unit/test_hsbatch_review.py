"""hsbatch findings of the docs-vs-code review (session 32): the slack's upper bound, one warning
line for a multi-line Slurm error, a constraint that cannot be recorded in the comment, and the
--hase-explain column that marks the types passing every test."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from slurm_hase.errors import SlurmCommandError
from slurm_hase.hsbatch.plan import speed_slack
from slurm_hase.hsbatch.text import explain_table
from slurm_hase.predict.api import Prediction
from slurm_hase.predict.descriptor import WorkloadDescriptor
from slurm_hase.slurm.runner import Runner
from slurm_hase.slurm.types import Node, Partition
from tests.unit.test_hsbatch_core import hsbatch, script

SLURM_NOT_CONFIGURED = ("sbatch: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown "
                        "host\nsbatch: error: fetch_config: DNS SRV lookup failed\nsbatch: fatal: "
                        "Could not establish a configuration source\n")


def test_speed_slack_takes_its_documented_upper_bound() -> None:
    assert speed_slack({"HASE_SPEED_SLACK": "1e6"}) == (1e6, None)
    value, warning = speed_slack({"HASE_SPEED_SLACK": "1.000001e6"})
    assert value == 1.0 and warning is not None and "from 0 to 1e6" in warning


def test_a_multi_line_slurm_error_is_one_warning_line(tmp_path: Path) -> None:
    def no_slurm(runner: Runner) -> tuple[list[Node], list[Partition]]:
        raise SlurmCommandError(["scontrol", "show", "node"], 1, SLURM_NOT_CONFIGURED)

    s = script(tmp_path, "#SBATCH --gres=gpu:1\n#HASE model=resnet50\n")
    r = hsbatch([s], cluster_fn=no_slurm)
    assert len(r.calls) == 1 and r.code == 0  # submitted all the same (fail-open)
    assert len(r.err.splitlines()) == 1, r.err
    assert r.err.startswith("hsbatch: warning: cannot read GPU types from Slurm (")
    assert "DNS SRV lookup failed; sbatch: fatal" in r.err


LONG_TYPES = [f"gpu{i:02d}-" + "x" * 26 for i in range(15)]  # 32-character type names


def _many_long_types(runner: Runner) -> tuple[list[Node], list[Partition]]:
    """15 fast GPU types with 32-character names and one slow one (t4)."""
    nodes = [Node(f"n{i}", "IDLE", features=(t,), partitions=("gpu",), gpus={t: 4})
             for i, t in enumerate([*LONG_TYPES, "t4"])]
    return nodes, [Partition("gpu", default=True)]


def _fast_but_t4(path: str | None):  # type: ignore[no-untyped-def]
    def predict(desc: WorkloadDescriptor, types: Sequence[str]) -> dict[str, Prediction]:
        it = desc.iterations or 0
        return {t: Prediction(t, s, s * 1.2, s * it, s * 1.2 * it)
                for t in types for s in [1.0 if t == "t4" else 0.1]}
    return predict


def test_constraint_that_cannot_be_recorded_is_not_added(tmp_path: Path) -> None:
    """The 15 fast types' names do not fit in the comment beside the description: unrecorded,
    the daemon would take hsbatch's constraint for the user's and never change it, so hsbatch
    adds none and says so; the description is still attached."""
    s = script(tmp_path, "#SBATCH --gres=gpu:1\n#HASE model=resnet50 iterations=1000\n")
    r = hsbatch([s], cluster_fn=_many_long_types, predictor=_fast_but_t4)
    (argv, _), = r.calls
    assert not any(a.startswith("--constraint") for a in argv), argv
    [comment] = [a.removeprefix("--comment=") for a in argv if a.startswith("--comment=")]
    desc = WorkloadDescriptor.from_comment(comment)
    assert desc is not None and desc.model == "resnet50" and desc.auto_types == ()
    assert "no room in the comment to record the GPU-type constraint (gpu00-" in r.err
    # with 4 of them it fits: the constraint is added and recorded
    few = LONG_TYPES[:4]

    def four(runner: Runner) -> tuple[list[Node], list[Partition]]:
        nodes, parts = _many_long_types(runner)
        return [n for n in nodes if set(n.gpus) & {*few, "t4"}], parts

    r = hsbatch([s], cluster_fn=four, predictor=_fast_but_t4)
    (argv, _), = r.calls
    assert f"--constraint={'|'.join(few)}" in argv and "no room" not in r.err


def test_explain_marks_candidates_whether_or_not_a_constraint_is_added(tmp_path: Path) -> None:
    s = script(tmp_path, "#SBATCH --gres=gpu:1\n#HASE model=resnet50\n")
    for extra, added in (([], "a100"), (["--hase-no-constraint"], "(none)")):
        r = hsbatch(["--hase-explain", *extra, s])
        table = r.err.split("hsbatch: description:")[0]
        assert "candidate" in table.splitlines()[1] and "chosen" not in table
        marked = [line.split()[0] for line in table.splitlines()[2:] if line.rstrip().endswith("*")]
        assert marked == ["a100"], table
        assert f"hsbatch: constraint added: {added}" in r.err
    assert explain_table([], None, None, []).count("candidate") == 1


@pytest.mark.parametrize(("how", "env", "header"), [
    ("none", {}, ""), ("command line", {}, ""), ("env", {"SBATCH_IGNORE_PBS": "1"}, ""),
    ("env 0", {"SBATCH_IGNORE_PBS": "0"}, ""), ("empty env", {"SBATCH_IGNORE_PBS": ""}, ""),
    ("#SBATCH", {}, "#SBATCH --ignore-pbs\n")])
def test_pbs_lines_count_unless_sbatch_ignores_them(tmp_path: Path, how: str,
                                                   env: dict[str, str], header: str) -> None:
    """sbatch ignores #PBS lines with --ignore-pbs on the command line or in an #SBATCH line,
    or SBATCH_IGNORE_PBS empty, `yes` or a non-zero number; then hsbatch may constrain the job
    as usual. This test used to say that any non-empty value (0 too) ignores them and the empty
    one does not: the real sbatch 22.05.8 (`sbatch -v`) reads them for 0 and ignores them for
    an empty value, as its flag rule for variables says (test_hsbatch_fix42_sbatch_rules.py)."""
    s = script(tmp_path, header + "#PBS -N pbsname\n#SBATCH --gres=gpu:1\n#HASE model=resnet50\n")
    r = hsbatch([*(["--ignore-pbs"] if how == "command line" else []), s], env=env)
    (argv, _), = r.calls
    constrained = any(a.startswith("--constraint=") for a in argv)
    ignored = ("command line", "env", "empty env", "#SBATCH")
    assert constrained is (how in ignored), (how, argv)
