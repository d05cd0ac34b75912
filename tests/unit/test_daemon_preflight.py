"""Preflight: the daemon's config checked against the partitions, GPU types and accounts Slurm
reports (pure check_config), and `hase schedd run` refusing / warning on it."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_hase.cli import schedd_cmd
from slurm_hase.cli.main import main
from slurm_hase.daemon.config import DaemonConfig
from slurm_hase.daemon.fake import FakeBackend, gpu_node
from slurm_hase.daemon.preflight import (
    ClusterFacts,
    Problem,
    check_config,
    cluster_facts,
    observe_facts,
    run_preflight,
)
from slurm_hase.errors import SlurmUnavailableError
from slurm_hase.slurm.tres import node_gres_counts
from slurm_hase.slurm.types import Node, Partition

# the local test cluster's shape: gpu has every type, debug only t4, cpu no GPUs
FACTS = ClusterFacts({"gpu": frozenset({"a100", "v100", "t4"}), "debug": frozenset({"t4"}),
                      "cpu": frozenset()}, frozenset({"teama", "teamb"}))


def _messages(problems: list[Problem]) -> list[tuple[bool, str]]:
    return [(p.fatal, p.message) for p in problems]


def test_a_config_that_matches_the_cluster_has_no_problems() -> None:
    cfg = DaemonConfig(partitions=("gpu", "debug"), gpu_types=("a100", "t4"),
                       shares={"teama": 2.0, "teamb": 1.0})
    assert check_config(cfg, FACTS) == []
    assert check_config(DaemonConfig(), FACTS) == []  # all defaults: all partitions


def test_no_configured_partition_exists_is_fatal_and_names_both_sides() -> None:
    problems = check_config(DaemonConfig(partitions=("gpux", "gpuy")), FACTS)
    assert _messages(problems) == [(True, (
        "[schedd] partitions: none of the configured partitions (gpux, gpuy) exists in Slurm "
        "(Slurm's partitions: cpu, debug, gpu); the daemon would manage no job"))]


def test_fatal_on_a_cluster_without_partitions() -> None:
    problems = check_config(DaemonConfig(partitions=("gpu",)), ClusterFacts({}))
    assert [p.fatal for p in problems] == [True]
    assert "(Slurm's partitions: none)" in problems[0].message


def test_some_partitions_missing_is_a_warning() -> None:
    problems = check_config(DaemonConfig(partitions=("gpu", "gpux")), FACTS)
    assert _messages(problems) == [(False, (
        "[schedd] partitions: gpux not in Slurm (Slurm's partitions: cpu, debug, gpu); "
        "managing gpu only"))]


def test_partition_without_gpu_nodes_is_a_warning() -> None:
    problems = check_config(DaemonConfig(partitions=("gpu", "cpu")), FACTS)
    assert _messages(problems) == [(False, (
        "[schedd] partitions: cpu has no GPU nodes; the daemon steers nothing there"))]
    facts = ClusterFacts({**FACTS.partitions, "login": frozenset()})
    problems = check_config(DaemonConfig(partitions=("cpu", "login")), facts)
    assert _messages(problems) == [(False, (
        "[schedd] partitions: cpu, login have no GPU nodes; the daemon steers nothing there"))]


def test_a_partition_whose_gpus_have_no_type_is_not_called_gpu_less() -> None:
    """A site that has not typed its GRES yet (install.md step 2): `Gres=gpu:4` nodes have
    GPUs, which the daemon cannot steer. The warning said the partition has no GPU nodes."""
    gpus, mps = node_gres_counts("gpu:4,mps:400")  # scontrol show node's Gres= of such a node
    nodes = [Node(name="g1", state="IDLE", partitions=("gpu",), gpus=gpus, mps_total=mps),
             Node(name="c1", state="IDLE", partitions=("cpu",))]
    facts = cluster_facts(nodes, [Partition("gpu", ("g1",)), Partition("cpu", ("c1",))])
    problems = check_config(DaemonConfig(partitions=("gpu", "cpu")), facts)
    assert _messages(problems) == [
        (False, "[schedd] partitions: cpu has no GPU nodes; the daemon steers nothing there"),
        (False, "[schedd] partitions: the GPUs of gpu have no type (Gres=gpu:N, not "
                "gpu:TYPE:N); the daemon steers nothing there until the nodes' Gres and "
                "Features name it (docs/install.md, step 2)")]
    # one typed node is enough for the daemon to steer jobs there: no warning
    typed = cluster_facts([*nodes, gpu_node("a1", "a100")], [Partition("gpu", ("g1", "a1"))])
    assert check_config(DaemonConfig(partitions=("gpu",)), typed) == []


def test_gpu_types_without_nodes_in_the_managed_partitions() -> None:
    problems = check_config(DaemonConfig(gpu_types=("a100", "h100")), FACTS)
    assert _messages(problems) == [(False, (
        "[schedd] gpu_types: no node in any partition has h100 (GPU types there: a100, t4, v100)"))]
    # a100 exists, but not where the daemon looks
    problems = check_config(DaemonConfig(partitions=("debug",), gpu_types=("a100", "t4")), FACTS)
    assert _messages(problems) == [(False, (
        "[schedd] gpu_types: no node in partition debug has a100 (GPU types there: t4)"))]


def test_shares_for_unknown_accounts_is_a_warning() -> None:
    cfg = DaemonConfig(shares={"teama": 2.0, "nosuchacct": 1.0, "zzz": 1.0})
    assert _messages(check_config(cfg, FACTS)) == [(False, (
        "[shares] nosuchacct, zzz: not an account in Slurm's associations "
        "(accounts: teama, teamb); the share is never used"))]
    # accounts not read: nothing to compare with
    assert check_config(cfg, replace(FACTS, accounts=None)) == []


def test_fatal_comes_first_and_hides_the_gpu_check() -> None:
    cfg = DaemonConfig(partitions=("gpux",), gpu_types=("h100",), shares={"nosuchacct": 1.0})
    problems = check_config(cfg, FACTS)
    assert [p.fatal for p in problems] == [True, False]
    assert problems[1].message.startswith("[shares] nosuchacct")


def test_cluster_facts_from_nodes_and_partitions() -> None:
    nodes = [gpu_node("a1", "A100"), gpu_node("t1", "t4", partition="debug"),
             Node(name="c1", state="IDLE", partitions=("cpu",)),
             Node(name="x1", state="DOWN", gpus={"v100": 2}),  # listed only by its partition
             Node(name="z1", state="IDLE", partitions=("gpu",), gpus={"h100": 0})]
    parts = [Partition("gpu", ("a1", "t1", "x1")), Partition("debug", ("t1",)),
             Partition("empty", ())]
    facts = cluster_facts(nodes, parts, ["teama"])
    assert facts.partitions == {"gpu": {"a100", "t4", "v100"}, "debug": {"t4"},
                                "cpu": frozenset(), "empty": frozenset()}
    assert facts.gpu_types == {"a100", "t4", "v100"}
    assert facts.accounts == frozenset({"teama"})
    assert cluster_facts([], []).accounts is None


def test_observe_facts_asks_for_accounts_only_with_shares() -> None:
    backend = FakeBackend(nodes=[gpu_node("a1", "a100")], shares={"teama": 1.0})
    assert observe_facts(backend, DaemonConfig()).accounts is None
    assert (observe_facts(backend, DaemonConfig(shares={"x": 1.0})).accounts
            == frozenset({"root", "teama"}))


def test_shares_for_a_parent_share_account_are_not_warned_about() -> None:
    """sacctmgr's account list, not the shares, says which accounts exist: an account whose
    fairshare is `parent` has no share of its own but is an account."""
    backend = FakeBackend(nodes=[gpu_node("a1", "a100")], shares={"teama": 60.0})
    backend.account_names = {"root", "teama", "physics"}
    cfg = DaemonConfig(shares={"physics": 2.0, "nosuch": 1.0})
    assert _messages(run_preflight(backend, cfg)) == [(False, (
        "[shares] nosuch: not an account in Slurm's associations "
        "(accounts: physics, root, teama); the share is never used"))]


class NoSacctmgr(FakeBackend):
    def account_shares(self) -> dict[str, float]:
        raise SlurmUnavailableError(["sacctmgr"], 1, "Problem talking to the database")

    def accounts(self) -> set[str]:
        raise SlurmUnavailableError(["sacctmgr"], 1, "Problem talking to the database")


def test_sacctmgr_failing_skips_only_the_shares_check(caplog: pytest.LogCaptureFixture) -> None:
    backend = NoSacctmgr(nodes=[gpu_node("a1", "a100")])
    cfg = DaemonConfig(partitions=("gpux",), shares={"nosuch": 1.0})
    with caplog.at_level(logging.WARNING, logger="slurm_hase.daemon"):
        problems = run_preflight(backend, cfg)
    assert [p.fatal for p in problems] == [True]  # the partition check still ran
    assert "[shares] not checked" in caplog.text


def test_run_preflight_skips_when_slurm_is_away(caplog: pytest.LogCaptureFixture) -> None:
    backend = FakeBackend()
    backend.unavailable = True
    with caplog.at_level(logging.WARNING, logger="slurm_hase.daemon"):
        assert run_preflight(backend, DaemonConfig(partitions=("gpux",))) == []
    assert "preflight check skipped" in caplog.text


# -- through `hase schedd run` ------------------------------------------------------------

def _run(tmp_path: Path, toml: str, backend: FakeBackend, monkeypatch: pytest.MonkeyPatch,
         capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.setattr(schedd_cmd, "_backend", lambda: backend)
    cfg = tmp_path / "c.toml"
    cfg.write_text('[schedd]\nlog_format = "text"\nlog_level = "ERROR"\n' + toml)
    with pytest.raises(SystemExit) as exc:
        main(["schedd", "run", "--once", "--dry-run", "--config", str(cfg),
              "--state-db", str(tmp_path / "s.db")])
        raise SystemExit(0)
    out = capsys.readouterr()
    code = exc.value.code
    return (code if isinstance(code, int) else 1), out.out, out.err


def _cluster() -> FakeBackend:
    return FakeBackend(nodes=[gpu_node("a1", "a100"), gpu_node("t1", "t4", partition="debug")],
                       shares={"teama": 1.0})


def test_run_refuses_a_config_whose_partitions_do_not_exist(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(tmp_path, 'partitions = ["gpux"]\n', _cluster(), monkeypatch, capsys)
    assert code == 2 and out == ""
    assert err == ("hase: error: [schedd] partitions: none of the configured partitions (gpux) "
                   "exists in Slurm (Slurm's partitions: debug, gpu); the daemon would manage "
                   "no job\n")
    assert not (tmp_path / "s.db").exists()  # refused before the store was opened


def test_run_warns_and_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    toml = 'partitions = ["gpu", "gpux"]\ngpu_types = ["a100", "h100"]\n[shares]\nnosuch = 2.0\n'
    code, out, err = _run(tmp_path, toml, _cluster(), monkeypatch, capsys)
    assert code == 0, err
    warnings = [ln for ln in err.splitlines() if ln.startswith("hase: warning: ")]
    assert len(warnings) == 3
    assert "gpux not in Slurm" in warnings[0] and "h100" in warnings[1]
    assert "[shares] nosuch" in warnings[2]
    assert "0 pending jobs" in out


def test_run_with_slurm_away_is_not_refused_by_the_preflight(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    backend = _cluster()
    backend.unavailable = True
    code, _, err = _run(tmp_path, 'partitions = ["gpux"]\n', backend, monkeypatch, capsys)
    assert code == 1  # the loop's own failure, not a config refusal
    assert err == ("hase: error: no cycle completed: squeue... exited 1: Unable to contact slurm "
                   "controller (connect failure)\n")
