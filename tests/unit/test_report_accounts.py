"""`hase report --account`: which accounts Slurm knows (root and fairshare=parent ones too), and
what the account filter keeps of the whole report (entitlements, shares, Jain's index)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from slurm_hase.cli import report_cmd
from slurm_hase.cli.main import cli
from slurm_hase.errors import SlurmCommandError, SlurmParseError
from slurm_hase.slurm.command_backend import CommandBackend
from slurm_hase.slurm.parse_shares import parse_sacctmgr_shares
from slurm_hase.slurm.runner import CommandResult
from slurm_hase.slurm.types import AccountingRecord, Job, JobState, Node

LOCAL = "local-22.05"
# sacctmgr of a tree with a sub-account whose fairshare is `parent` (physics under teama)
PARENT_ASSOC = ("root|||1\nroot||root|1\nteama|root||60\nphysics|root||parent\nphysics||alice|1\n"
                "teamb|root||40\n")
PARENT_ACCOUNTS = "root\nteama\nphysics\nteamb\n"


class Runner:
    """Answers scontrol show config (ClusterName hase) and sacctmgr's accounts of hase."""

    def __init__(self, out: str, returncode: int = 0) -> None:
        self.out, self.returncode = out, returncode

    def run(self, argv: Any, **_: Any) -> CommandResult:
        from slurm_hase.slurm.commands import sacctmgr_accounts, show_config

        if list(argv) == show_config():
            return CommandResult(tuple(argv), 0, "ClusterName = hase\n", "")
        assert list(argv) == sacctmgr_accounts("hase")
        return CommandResult(tuple(argv), self.returncode, self.out,
                             "" if self.returncode == 0 else "sacctmgr: error: Problem talking to the database")


class Backend:
    """Live-mode seam: one teama job, the shares and accounts of `assoc`/`accounts`."""

    def __init__(self, assoc: str, accounts: str, returncode: int = 0) -> None:
        self.assoc = assoc
        self.backend = CommandBackend(Runner(accounts, returncode))  # sacctmgr's own parser
        self.calls = 0  # accounts() asked

    def accounts(self) -> set[str]:
        self.calls += 1
        return self.backend.accounts()

    def accounting(self, *, since: str, until: str) -> list[AccountingRecord]:
        return [AccountingRecord("1", "j", "teama", "alice", JobState.COMPLETED, submit_time=0,
                                 start_time=0, end_time=3600, elapsed_s=3600,
                                 alloc_gpus={"t4": 1}, nodes="t4-1")]

    def account_shares(self) -> dict[str, float]:
        return parse_sacctmgr_shares(self.assoc)

    def nodes(self) -> list[Node]:
        return [Node("t4-1", "IDLE", gpus={"t4": 4})]

    def jobs(self) -> list[Job]:
        return []


def _usage(monkeypatch: pytest.MonkeyPatch, backend: Backend, accounts: str) -> Any:
    monkeypatch.setattr(report_cmd, "_backend", lambda timeout_s: backend)
    return CliRunner().invoke(cli, ["report", "usage", "--since", "1970-01-01", "--account",
                                    accounts, "--weights", "none"])


def test_sacctmgr_accounts_capture_lists_root(fixtures_dir: Path) -> None:
    """The local cluster's `sacctmgr show account` (capture-local.sh): root is an account, and
    in the shares its own user's part (root||root|1, beside teama and teamb)."""
    from slurm_hase.slurm.parse_sacct_text import parse_sacctmgr_accounts

    raw = (fixtures_dir / "slurm" / LOCAL / "sacctmgr-accounts.txt").read_text()
    assert parse_sacctmgr_accounts(raw) == {"root", "teama", "teamb"}
    shares = parse_sacctmgr_shares((fixtures_dir / "slurm" / LOCAL / "sacctmgr-shares.txt").read_text())
    assert shares["root"] == 1.0
    assert parse_sacctmgr_accounts("") == set()
    with pytest.raises(SlurmParseError):
        parse_sacctmgr_accounts("root\ntea")  # cut mid-record
    with pytest.raises(SlurmParseError):
        parse_sacctmgr_accounts("root||1\n")  # not the account list


@pytest.mark.parametrize("account", ["root", "physics"])
def test_root_and_parent_share_accounts_are_known(monkeypatch: pytest.MonkeyPatch,
                                                  account: str) -> None:
    """sacctmgr lists root and `parent`-share accounts; neither is a reason to warn that Slurm
    does not know the account. Root's own user holds its 1 of root's; a `parent` account's
    users hold their share in its parent's pool (here alice's 1 of root's)."""
    assert parse_sacctmgr_shares(PARENT_ASSOC).get(account) == 1.0
    backend = Backend(PARENT_ASSOC, PARENT_ACCOUNTS)
    res = _usage(monkeypatch, backend, account)
    assert res.exit_code == 0, res.output
    assert res.stderr == (f"hase: warning: --account {account} has no jobs in this window "
                          "(accounts with jobs: teama)\n")
    assert backend.calls == 1
    typo = _usage(monkeypatch, backend, "tema")
    assert typo.stderr == ("hase: warning: --account tema is not an account Slurm knows "
                           "(accounts with jobs: teama)\n")


def test_accounts_asked_only_for_a_warning_and_never_guessed(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = Backend(PARENT_ASSOC, PARENT_ACCOUNTS)
    assert _usage(monkeypatch, backend, "teama").stderr == ""
    assert backend.calls == 0  # every --account has jobs: sacctmgr not asked
    down = Backend(PARENT_ASSOC, "", returncode=1)
    res = _usage(monkeypatch, down, "typo")
    assert res.exit_code == 0
    # sacctmgr cannot tell: the shares alone (no root, no parent accounts) do not decide
    assert res.stderr == ("hase: warning: --account typo has no jobs in this window "
                          "(accounts with jobs: teama)\n")


class NoShares(Backend):
    def account_shares(self) -> dict[str, float]:
        raise SlurmCommandError(["sacctmgr"], 1, "down")


def test_known_accounts_without_shares(monkeypatch: pytest.MonkeyPatch) -> None:
    res = _usage(monkeypatch, NoShares(PARENT_ASSOC, PARENT_ACCOUNTS), "physics,nope")
    assert "--account physics has no jobs in this window" in res.stderr
    assert "--account nope is not an account Slurm knows" in res.stderr


def test_sacctmgr_failing_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    """Live, a failed sacctmgr leaves the report without entitlements: a warning says so
    instead of Jain's index switching basis unannounced."""
    monkeypatch.setattr(report_cmd, "_backend", lambda timeout_s: NoShares(PARENT_ASSOC, PARENT_ACCOUNTS))
    res = CliRunner().invoke(cli, ["report", "fairness", "--since", "1970-01-01", "--weights",
                                   "none", "--json"])
    assert res.exit_code == 0, res.output
    assert res.stderr.startswith("hase: warning: sacctmgr failed (")
    assert "no entitlements" in res.stderr
    data = json.loads(res.stdout)
    assert data["jain_basis"] == "normalised GPU-hours"
    assert [a["ratio"] for a in data["accounts"]] == [None]


class MixedGres(Backend):
    """A node with an untyped `gpu:2` beside `gpu:a100:2`, where an MPS share ran."""

    def nodes(self) -> list[Node]:
        return [Node("mix-1", "IDLE", gpus={"": 2, "a100": 2})]

    def accounting(self, *, since: str, until: str) -> list[AccountingRecord]:
        return [AccountingRecord("2", "j", "teama", "alice", JobState.COMPLETED, submit_time=0,
                                 start_time=0, end_time=3600, elapsed_s=3600,
                                 alloc_tres={"gres/mps": "50"}, nodes="mix-1")]


def test_node_type_is_the_typed_gres_beside_an_untyped_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report_cmd, "_backend", lambda timeout_s: MixedGres(PARENT_ASSOC, PARENT_ACCOUNTS))
    res = CliRunner().invoke(cli, ["report", "usage", "--since", "1970-01-01", "--weights",
                                   "none", "--json"])
    assert res.exit_code == 0, res.output
    [teama] = json.loads(res.stdout)["accounts"]
    assert teama["gpu_hours"] == {"a100": 0.5}


# --- finding 4: --account limits the rows, not the whole the rows are measured against ---------

@pytest.fixture()
def capture(fixtures_dir: Path) -> Path:
    return fixtures_dir / "slurm" / "24.11" / "sacct.json"


def _json(*args: str) -> dict[str, Any]:
    res = CliRunner().invoke(cli, ["report", *args, "--json"])
    assert res.exit_code == 0, res.output
    return dict(json.loads(res.stdout))


def test_account_filter_keeps_entitlement_within_the_whole_tree(capture: Path) -> None:
    """--account teamb shows teamb's row as it is in the whole report: entitled 40% of shares
    teama=60,teamb=40, its share of every account's GPU-hours, Jain's index over all accounts."""
    opts = ["--input", str(capture), "--shares", "teama=60,teamb=40", "--weights", "none"]
    every = _json("fairness", *opts)
    one = _json("fairness", *opts, "--account", "teamb")
    [teamb] = [a for a in every["accounts"] if a["account"] == "teamb"]
    assert one["accounts"] == [teamb]
    assert teamb["entitlement"] == pytest.approx(0.4) and teamb["share"] < 1.0
    assert teamb["ratio"] == pytest.approx(teamb["share"] / 0.4)
    assert one["jain_index"] == every["jain_index"] < 1.0
    assert one["total_norm_gpu_hours"] == every["total_norm_gpu_hours"]
    assert one["only_accounts"] == ["teamb"] and every["only_accounts"] == []
    text = CliRunner().invoke(cli, ["report", "fairness", *opts, "--account", "teamb"]).stdout
    row = next(ln.split() for ln in text.splitlines() if ln.startswith("teamb"))
    assert row[4] == "40.0%"
    assert text.splitlines()[-1].startswith(
        "Jain's fairness index over all accounts, not only teamb (share/entitlement): ")


def test_account_filter_usage_rows_and_footer(capture: Path) -> None:
    opts = ["--input", str(capture), "--weights", "none"]
    every = _json("usage", *opts)
    one = _json("usage", *opts, "--account", "teamb")
    assert [a["account"] for a in one["accounts"]] == ["teamb"]
    assert {u["account"] for u in one["users"]} == {"teamb"}
    assert one["accounts"] == [a for a in every["accounts"] if a["account"] == "teamb"]
    assert one["only_accounts"] == ["teamb"] and every["only_accounts"] == []
    assert one["total_gpu_hours"] == every["total_gpu_hours"]
    text = CliRunner().invoke(cli, ["report", "usage", *opts, "--account", "teamb"]).stdout
    assert text.splitlines()[-1].startswith(
        f"total of all accounts, not only teamb: {every['total_gpu_hours']:.3f} GPU-hours")


def test_live_account_filter_uses_sacctmgr_shares_of_every_account(
        monkeypatch: pytest.MonkeyPatch) -> None:
    backend = Backend(PARENT_ASSOC, PARENT_ACCOUNTS)
    monkeypatch.setattr(report_cmd, "_backend", lambda timeout_s: backend)
    res = CliRunner().invoke(cli, ["report", "fairness", "--since", "1970-01-01", "--account",
                                   "teama", "--json"])
    [teama] = json.loads(res.stdout)["accounts"]
    # physics' share is `parent`: its user alice holds her 1 beside teama's 60, teamb's 40
    # and root's own user's 1
    assert teama["entitlement"] == pytest.approx(60 / 102)
    assert teama["ratio"] == pytest.approx(102 / 60)


def test_entitlements_follow_the_account_tree(fixtures_dir: Path) -> None:
    """capture-local.sh's tree: physa's share 3 counts against its siblings under physics
    (share 1 of root's 102), not against teama's 60: one GPU-hour each in physa and teama is
    physa at ~100x its entitlement, not ~20x (as when every share sat beside every other)."""
    from slurm_hase.reports.fairness import fairness_report

    tree = parse_sacctmgr_shares(
        (fixtures_dir / "slurm" / LOCAL / "sacctmgr-shares-tree.txt").read_text())
    recs = [AccountingRecord(str(i), "j", account, "alice", JobState.COMPLETED, submit_time=0,
                             start_time=0, end_time=3600, elapsed_s=3600, alloc_gpus={"t4": 1},
                             nodes="t4-1") for i, account in enumerate(("physa", "teama"))]
    rows = {r.account: r for r in fairness_report(recs, shares=tree).accounts}
    total = 1 + 0.4 + 0.6 + 60 + 40  # every part of root's 102 (root's own user's 1 too)
    assert rows["physa"].entitlement == pytest.approx(0.6 / total)
    assert rows["teama"].entitlement == pytest.approx(60 / total)
    assert rows["physa"].ratio == pytest.approx(0.5 / (0.6 / total))
