"""The MPS prolog caps the job's server at its share on the daemon side, on the right GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_mps_scripts import _calls, _daemon_env, _run, _scripts, node

__all__ = ["node"]  # the fixture, used by name


def test_explicit_share_wins_over_the_inherited_gres_percentage(node: dict[str, Path]) -> None:
    """--gres=mps:25 with --hase-mps=50: slurmd hands the prolog 25, the plugin 50. A client can
    only lower the daemon's limit, so the daemon must hold 50, not the inherited 25."""
    scripts = _scripts(node)
    proc = _run(scripts["prolog"], node, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="25",
                SPANK_SLURM_HASE_MPS="50")
    assert proc.returncode == 0, proc.stderr
    assert _daemon_env(node) == ["order=[PCI_BUS_ID] share=[50]"]
    stdins = [c.split(" stdin=[")[1].split("]")[0] for c in _calls(node)]
    assert stdins == ["", "set_default_active_thread_percentage 50", "start_server -uid 1234"]


def test_gres_percentage_alone_caps_the_server(node: dict[str, Path]) -> None:
    scripts = _scripts(node)
    proc = _run(scripts["prolog"], node, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="25")
    assert proc.returncode == 0, proc.stderr
    assert "set_default_active_thread_percentage 25" in _calls(node)[1]


@pytest.mark.parametrize("share", ["0", "101", "50.5", "1e2", "-5", "0050x", "99999999999999999999"])
@pytest.mark.parametrize("policy", ["drain", "ignore"])
def test_a_share_that_is_no_percentage_is_refused(node: dict[str, Path], share: str,
                                                  policy: str) -> None:
    """The job's request is refused, never the node: a user sets the share (--hase-mps, or
    the job API's SPANK environment directly), so under `drain` a bad one drained the node."""
    scripts = _scripts(node, on_failure=policy)
    proc = _run(scripts["prolog"], node, SLURM_HASE_MPS=share)
    assert proc.returncode == 0
    assert f"MPS share '{share}' is not a whole percentage of a GPU from 1 to 100" in proc.stderr
    assert "the job's request is refused, not the node" in proc.stderr
    assert _calls(node) == []  # no daemon started


def test_leading_zeros_are_a_percentage(node: dict[str, Path]) -> None:
    scripts = _scripts(node)
    proc = _run(scripts["prolog"], node, SLURM_HASE_MPS="050")
    assert proc.returncode == 0, proc.stderr
    assert _daemon_env(node) == ["order=[PCI_BUS_ID] share=[50]"]


def test_a_refused_percentage_stops_the_daemon(node: dict[str, Path]) -> None:
    scripts = _scripts(node, on_failure="ignore")
    proc = _run(scripts["prolog"], node, SLURM_HASE_MPS="40",
                FAKE_MPS_FAIL="set_default_active_thread_percentage")
    assert proc.returncode == 0
    assert "set_default_active_thread_percentage 40 failed: fake failure" in proc.stderr
    assert not (node["pipe"] / "4242").exists()
    assert not any("start_server" in c for c in _calls(node))


def test_a_share_with_a_newline_cannot_forge_a_log_line(node: dict[str, Path]) -> None:
    # the job API sets SPANK_SLURM_HASE_MPS to any string; the refusal quoted it as it was
    scripts = _scripts(node)
    proc = _run(scripts["prolog"], node, SPANK_SLURM_HASE_MPS="50\nhase-mps job=1: FORGED")
    assert proc.returncode == 0
    refusals = [ln for ln in proc.stderr.splitlines() if "is not a whole percentage" in ln]
    assert len(refusals) == 1 and "'50?hase-mps job=1: FORGED'" in refusals[0], proc.stderr
    assert not [ln for ln in proc.stderr.splitlines() if ln.startswith("hase-mps job=1: FORGED")]
