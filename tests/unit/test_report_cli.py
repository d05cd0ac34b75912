"""`hase report usage|fairness`: table, --json, --account, --shares, --plot, live backend seam."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from slurm_hase.cli import report_cmd
from slurm_hase.cli.main import cli
from slurm_hase.errors import ConfigError, OptionalDependencyError, SlurmCommandError
from slurm_hase.slurm.types import AccountingRecord, Job, JobState, Node


@pytest.fixture()
def capture(fixtures_dir: Path) -> Path:
    # the 24.11 capture of ../shared/data/slurm-captures, byte for byte (tests/fixtures/slurm)
    return fixtures_dir / "slurm" / "24.11" / "sacct.json"


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, ["report", *args])


def test_usage_table(capture: Path) -> None:
    res = _invoke("usage", "--input", str(capture), "--weights", "none")
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].split() == ["account/user", "jobs", "pending", "unstarted", "a100", "h", "t4", "h",
                                "v100", "h", "GPU", "h", "norm", "h", "wait"]
    assert lines[2].split()[:4] == ["teama", "8", "3", "0"]  # the array's 3 pending tasks, nothing cancelled
    assert any(ln.split()[:1] == ["root"] for ln in lines)


def test_fairness_json_with_shares_and_account_filter(capture: Path) -> None:
    res = _invoke("fairness", "--input", str(capture), "--shares", "teama=2,teamb=1",
                  "--weights", "a100=1,v100=0.5,t4=0.25", "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["jain_basis"] == "share/entitlement"
    assert [a["entitlement"] for a in data["accounts"]] == [pytest.approx(2 / 3), pytest.approx(1 / 3)]
    assert data["speed_weights"] == {"a100": 1.0, "t4": 0.25, "v100": 0.5}
    every = json.loads(_invoke("fairness", "--input", str(capture), "--json").output)
    res = _invoke("fairness", "--input", str(capture), "--account", "teamb", "--json")
    data = json.loads(res.output)
    assert [a["account"] for a in data["accounts"]] == ["teamb"]
    # --account limits the rows; Jain's index stays the one over every account
    assert data["jain_index"] == every["jain_index"] < 1.0 and data["only_accounts"] == ["teamb"]


def test_usage_json_has_users(capture: Path) -> None:
    data = json.loads(_invoke("usage", "--input", str(capture), "--json").output)
    assert {u["user"] for u in data["users"]} == {"root"}
    assert "jain_index" not in data


def test_bad_shares_is_config_error(capture: Path) -> None:
    res = _invoke("fairness", "--input", str(capture), "--shares", "teama")
    assert res.exit_code != 0 and "bad --shares" in str(res.exception)


def test_plot_writes_png_or_fails_clearly(capture: Path, tmp_path: Path) -> None:
    out = tmp_path / "fair.png"
    res = _invoke("fairness", "--input", str(capture), "--plot", str(out))
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert isinstance(res.exception, OptionalDependencyError)
        assert "matplotlib" in str(res.exception)
        return
    assert res.exit_code == 0, res.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib(monkeypatch: pytest.MonkeyPatch, capture: Path, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    res = _invoke("fairness", "--input", str(capture), "--plot", str(tmp_path / "x.png"))
    assert isinstance(res.exception, OptionalDependencyError)
    assert "pip install" in str(res.exception)
    assert not (tmp_path / "x.png").exists()


class FakeBackend:
    """Live-mode seam: accounting, shares (failing), nodes."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def accounting(self, *, since: str, until: str) -> list[AccountingRecord]:
        self.calls.append((since, until))
        return [
            AccountingRecord("1", "j", "a", "u", JobState.COMPLETED, submit_time=0, start_time=0,
                             end_time=3600, elapsed_s=3600, alloc_tres={"gres/mps": "50"},
                             nodes="t4-1"),
        ]

    def account_shares(self) -> dict[str, float]:
        raise SlurmCommandError(["sacctmgr"], 1, "down")

    def nodes(self) -> list[Node]:
        return [Node("t4-1", "IDLE", gpus={"t4": 4})]

    def jobs(self) -> list[Job]:
        return []


@pytest.mark.usefixtures("utc")
def test_live_mode_uses_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = FakeBackend()
    monkeypatch.setattr(report_cmd, "_backend", lambda timeout_s: backend)
    res = _invoke("usage", "--since", "2026-01-01", "--until", "now", "--json", "--weights", "none")
    assert res.exit_code == 0, res.output
    # sacct is asked for the very window the report clips to, spelt out to the second
    [(since, until)] = backend.calls
    data = json.loads(res.stdout)
    assert res.stderr.startswith("hase: warning: sacctmgr failed")  # this fake's sacctmgr fails
    assert since == "2026-01-01T00:00:00" and data["window"][0] == 1767225600
    assert until == datetime.fromtimestamp(data["window"][1], UTC).strftime("%Y-%m-%dT%H:%M:%S")
    assert data["accounts"][0]["gpu_hours"] == {"t4": 0.0}  # clipped: the job ran in 1970
    res = _invoke("usage", "--since", "bogus", "--json", "--weights", "none")
    assert isinstance(res.exception, ConfigError) and len(backend.calls) == 1  # sacct not run


@pytest.mark.parametrize("command", ["usage", "fairness"])
def test_plot_to_missing_folder_names_the_path(command: str, capture: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    from slurm_hase.cli.main import main

    target = tmp_path / "no-such-dir" / "u.png"
    res = _invoke(command, "--input", str(capture), "--plot", str(target))
    assert isinstance(res.exception, ConfigError)
    with pytest.raises(SystemExit) as exc:
        main(["report", command, "--input", str(capture), "--plot", str(target)])
    assert exc.value.code == 2
    out = capsys.readouterr()
    assert out.err == f"hase: error: cannot write --plot {target}: No such file or directory\n"
    assert out.out == ""  # no table printed before the failure, and no traceback
    res = _invoke(command, "--input", str(capture), "--plot", str(tmp_path / "u.nonesuch"))
    assert isinstance(res.exception, ConfigError) and "u.nonesuch" in str(res.exception)
    assert "is not supported" in str(res.exception)


def test_unknown_weight_type_suggests_catalog_names(capture: Path) -> None:
    res = _invoke("usage", "--input", str(capture), "--weights", "a100=1,x200=0.5")
    assert isinstance(res.exception, ConfigError)
    msg = str(res.exception)
    assert msg.startswith("bad --weights: unknown GPU type 'x200'; did you mean h200")
    assert msg.endswith("(GPU types in the report: a100, t4, v100)")


def test_defaulted_weights_are_named(capture: Path) -> None:
    res = _invoke("usage", "--input", str(capture), "--weights", "A100=1,t4=0.5,h100=3,mps=0.1")
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[-1].endswith(
        "(weights a100=1, t4=0.5; no weight given, counted as 1: v100)")
    data = json.loads(_invoke("usage", "--input", str(capture), "--weights", "a100=1", "--json").output)
    assert data["speed_weights"] == {"a100": 1.0, "t4": 1.0, "v100": 1.0}
    assert data["defaulted_weights"] == ["t4", "v100"]
    for weights in ("none", "catalog"):
        data = json.loads(_invoke("usage", "--input", str(capture), "--weights", weights, "--json").output)
        assert data["defaulted_weights"] == []
    res = _invoke("fairness", "--input", str(capture), "--weights", "a100=1,v100=0.5")
    assert "normalised GPU-hours: weights a100=1, v100=0.5; no weight given, counted as 1: t4" in res.output


@pytest.mark.parametrize("shares, problem", [
    ("teamz=1", "the shares match no account in the report (shares: teamz=1; "),
    ("teama=0,teamb=0", "no account in the report has a positive share (shares: teama=0, teamb=0; "),
])
def test_shares_entitling_no_account_fall_back_to_hours(capture: Path, shares: str, problem: str) -> None:
    plain = json.loads(_invoke("fairness", "--input", str(capture), "--json").output)
    res = _invoke("fairness", "--input", str(capture), "--shares", shares, "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["jain_basis"] == "normalised GPU-hours"
    assert data["jain_index"] == plain["jain_index"] and 0.5 < data["jain_index"] < 1.0
    warning = f"hase: warning: {problem}accounts with jobs: teama, teamb); " \
              "Jain's index uses normalised GPU-hours instead\n"
    assert res.stderr == warning
    assert data["warnings"] == [warning.removeprefix("hase: warning: ").rstrip()]
    res = _invoke("fairness", "--input", str(capture), "--shares", shares)
    assert res.stdout.splitlines()[-1] == f"Jain's fairness index over accounts (normalised GPU-hours): " \
                                          f"{plain['jain_index']:.3f}"


def test_negative_share_is_refused(capture: Path) -> None:
    res = _invoke("fairness", "--input", str(capture), "--shares", "teama=2,teamb=-1")
    assert isinstance(res.exception, ConfigError)
    assert str(res.exception) == ("bad --shares item 'teamb=-1' in 'teama=2,teamb=-1': expected "
                                  "ACCOUNT=NUMBER (>= 0), e.g. teama=2")
    res = _invoke("fairness", "--input", str(capture), "--shares", "teama=nan")
    assert str(res.exception).startswith("bad --shares item 'teama=nan': ")


class KnownAccountsBackend(FakeBackend):
    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def account_shares(self) -> dict[str, float]:
        return {"a": 1.0, "quiet": 1.0}

    def accounts(self) -> set[str]:
        self.asked += 1
        return {"root", "a", "quiet"}


def test_account_without_jobs_is_warned_about_not_silently_empty(
        monkeypatch: pytest.MonkeyPatch, capture: Path) -> None:
    """--account with a typo or a quiet account still reports, with a warning that says which
    (sacctmgr knows the account or not) and the accounts that do have jobs."""
    backend = KnownAccountsBackend()
    monkeypatch.setattr(report_cmd, "_backend", lambda timeout_s: backend)
    res = CliRunner().invoke(cli, ["report", "usage", "--account", "a,quiet,typo", "--weights",
                                   "none"])
    assert res.exit_code == 0, res.output
    assert backend.asked == 1  # asked once, for both warnings
    assert ("hase: warning: --account quiet has no jobs in this window (accounts with jobs: a)"
            in res.stderr)
    assert ("hase: warning: --account typo is not an account Slurm knows (accounts with jobs: a)"
            in res.stderr)
    assert "--account a " not in res.stderr and "a " in res.stdout
    saved = CliRunner().invoke(cli, ["report", "fairness", "--input", str(capture), "--account",
                                     "nosuch", "--weights", "none"])
    assert saved.exit_code == 0
    assert "--account nosuch has no jobs in this window" in saved.stderr  # no sacctmgr to ask
    clean = CliRunner().invoke(cli, ["report", "usage", "--input", str(capture)])
    assert "warning" not in clean.stderr


def test_usage_for_one_user(capture: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--user keeps that user's rows and their accounts' (whole) rows; 'me' is the caller."""
    import getpass

    monkeypatch.setattr(getpass, "getuser", lambda: "root")  # the user of the capture's jobs
    every = json.loads(_invoke("usage", "--input", str(capture), "--json").stdout)
    res = CliRunner().invoke(cli, ["report", "usage", "--input", str(capture), "--json",
                                   "--user", "me"])
    assert res.exit_code == 0 and res.stderr == ""
    assert json.loads(res.stdout)["accounts"] == every["accounts"]
    # the text says its totals are not only root's rows; the JSON says whose rows it kept, as
    # only_accounts does for --account (it did not: totals beside rows that do not add up)
    assert (json.loads(res.stdout)["only_users"], every["only_users"]) == (["root"], [])
    none = CliRunner().invoke(cli, ["report", "usage", "--input", str(capture), "--user", "zed"])
    assert none.exit_code == 0
    assert none.stderr == "hase: warning: --user zed has no jobs in this window (users with jobs: root)\n"
    assert "teama" not in none.stdout


def test_plot_of_a_report_without_gpu_time_warns_nothing(tmp_path: Path) -> None:
    # a window with no GPU time (no jobs, or only pending ones) has no bars to label: matplotlib's
    # "No artists with labels found to put in legend" UserWarning reached the terminal
    pytest.importorskip("matplotlib")
    import warnings

    from slurm_hase.reports.fairness import fairness_report
    from slurm_hase.reports.plot import plot_report

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert plot_report(fairness_report([]), tmp_path / "empty.png").exists()


def test_user_warning_under_account_says_where_it_looked(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    # bob has a job in the window, in teamb; --account teama keeps teama's rows only, and the
    # warning said bob "has no jobs in this window", as if --user bob were a typo
    from slurm_hase.cli import report_cmd
    from slurm_hase.slurm.types import AccountingRecord, JobState

    def job(job_id: str, account: str, user: str) -> AccountingRecord:
        return AccountingRecord(job_id=job_id, name="j", account=account, user=user,
                                state=JobState.COMPLETED, submit_time=100, start_time=100,
                                end_time=3700, elapsed_s=3600, alloc_gpus={"a100": 1},
                                alloc_tres={"gres/gpu:a100": "1"}, nodes="n1")

    records = [job("1", "teama", "alice"), job("2", "teamb", "bob")]
    monkeypatch.setattr(report_cmd, "_from_file", lambda path: report_cmd.Inputs(records, None, {}))
    res = CliRunner().invoke(cli, ["report", "usage", "--input", str(tmp_path / "x.json"),
                                   "--account", "teama", "--user", "bob"])
    assert res.exit_code == 0, res.output
    assert res.stderr == ("hase: warning: --user bob has no jobs in --account teama in this "
                          "window (users with jobs there: alice)\n")
