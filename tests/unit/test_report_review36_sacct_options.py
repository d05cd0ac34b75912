"""`hase report --timeout` (sacct over a long window can take minutes: the wait is an option,
and running past it is an error that says what to change) and `--cluster` (the report is of one
cluster: sacct --local by default, -M NAME with --cluster; never every cluster of a federation
or of a multi-cluster database)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from slurm_hase.cli import report_cmd
from slurm_hase.slurm import commands
from slurm_hase.slurm.command_backend import CommandBackend
from slurm_hase.slurm.runner import CommandResult, SubprocessRunner
from tests.conftest import run_main

SEP = commands.SACCT_DELIMITER
FIELDS = commands.SACCT_FIELDS
# sacct -X text of one job on cluster "west": 1 A100 for an hour (other fields empty)
ROW = {"JobID": "12", "JobName": "j", "Account": "teama", "User": "alice", "State": "COMPLETED",
       "Submit": "2026-12-01T10:00:00", "Eligible": "2026-12-01T10:00:00",
       "Start": "2026-12-01T10:00:00", "End": "2026-12-01T11:00:00", "ElapsedRaw": "3600",
       "AllocTRES": "billing=1,cpu=1,gres/gpu:a100=1,gres/gpu=1,node=1", "NodeList": "a100-1"}
SACCT_TEXT = SEP.join(FIELDS) + "\n" + SEP.join(ROW.get(f, "") for f in FIELDS) + "\n"
ASSOC = "root|||1\nteama|root||60\nteama||alice|1\nteamb|root||40\n"
WINDOW = ["--since", "2026-12-01T00:00:00", "--until", "2026-12-02T00:00:00"]


class Runner:
    """Answers sacct and sacctmgr (text as Slurm prints it), squeue and scontrol with nothing;
    records each argv and its timeout."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[str, ...], float]] = []

    def run(self, argv: Sequence[str], *, stdin: str | None = None,
            env: Mapping[str, str] | None = None, timeout_s: float = 60.0,
            cwd: str | None = None) -> CommandResult:
        self.calls.append((tuple(argv), timeout_s))
        out = {"sacct": SACCT_TEXT, "sacctmgr": ASSOC, "squeue": '{"jobs": []}\n'}.get(argv[0], "")
        return CommandResult(tuple(argv), 0, out, "")

    def argv(self, name: str) -> list[tuple[str, ...]]:
        return [a for a, _ in self.calls if a[0] == name]


@pytest.fixture()
def runner(monkeypatch: pytest.MonkeyPatch) -> Runner:
    fake = Runner()
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.setattr(report_cmd, "_backend", lambda timeout_s: CommandBackend(fake, timeout_s=timeout_s))
    return fake


def test_sacct_is_asked_for_one_cluster() -> None:
    """This cluster by default (--local: a federated cluster's sacct shows every member's
    jobs), else the one named (-M NAME); the shares of that cluster too (sacctmgr lists
    every cluster's associations)."""
    local = commands.sacct_parsable(since="now-1day", until="now")
    assert local[-1] == "--local" and "-M" not in local
    named = commands.sacct_parsable(since="now-1day", until="now", cluster="west")
    assert named[-2:] == ["-M", "west"] and "--local" not in named
    assert "cluster=west" in commands.sacctmgr_shares("west")
    assert not any(a.startswith("cluster=") for a in commands.sacctmgr_shares())


@pytest.mark.usefixtures("utc")
def test_cluster_option_reaches_sacct_and_sacctmgr(runner: Runner,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """--cluster west: sacct -M west, sacctmgr cluster=west, and neither this cluster's
    squeue (its pending jobs are not west's) nor its nodes."""
    code, out, err = run_main(["report", "fairness", *WINDOW, "--cluster", "west", "--json"],
                              capsys)
    assert (code, err) == (0, "hase: warning: Jain's index is taken over one account only: "
                              "teama is the only account with jobs, so the 1.000 says nothing "
                              "of fairness\n"), err
    [sacct] = runner.argv("sacct")
    assert sacct[-2:] == ("-M", "west")
    [sacctmgr] = runner.argv("sacctmgr")
    assert "cluster=west" in sacctmgr
    assert runner.argv("squeue") == runner.argv("scontrol") == []
    [teama] = json.loads(out)["accounts"]
    assert teama["gpu_hours"] == {"a100": 1.0} and teama["entitlement"] == pytest.approx(0.6)


@pytest.mark.usefixtures("utc")
def test_default_is_this_cluster(runner: Runner, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main(["report", "usage", *WINDOW, "--json"], capsys)
    assert code == 0, err
    [sacct] = runner.argv("sacct")
    assert sacct[-1] == "--local" and "-M" not in sacct
    assert runner.argv("squeue")  # this cluster's queue: pending now


@pytest.mark.parametrize("value", ["west,east", "all", "-1", " "])
def test_cluster_takes_one_name(runner: Runner, capsys: pytest.CaptureFixture[str],
                                value: str) -> None:
    code, out, err = run_main(["report", "usage", "--cluster", value], capsys)
    assert (code, out) == (2, "")
    assert err == (f"hase: error: --cluster takes one cluster name, not {value!r}: a report is "
                   "of one cluster\n")
    assert runner.calls == []


def test_cluster_with_input_is_refused(runner: Runner, capsys: pytest.CaptureFixture[str],
                                       tmp_path: Path) -> None:
    code, _, err = run_main(["report", "usage", "--cluster", "west", "--input",
                             str(tmp_path / "saved.json")], capsys)
    assert code == 2 and err.startswith("hase: error: --cluster is for reports from Slurm")


def test_no_jobs_of_the_named_cluster_is_said(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """sacct -M of a cluster it does not know prints the header only, exit 0 (22.05)."""
    fake = Runner()
    monkeypatch.setattr(fake, "run", lambda argv, **kw: CommandResult(
        tuple(argv), 0, SEP.join(FIELDS) + "\n" if argv[0] == "sacct" else "", ""))
    monkeypatch.setattr(report_cmd, "_backend", lambda timeout_s: CommandBackend(fake, timeout_s=timeout_s))
    code, _, err = run_main(["report", "usage", *WINDOW, "--cluster", "wset"], capsys)
    assert code == 0
    assert err.startswith("hase: warning: --cluster wset: sacct has no jobs of it in this window")


@pytest.mark.usefixtures("utc")
@pytest.mark.parametrize(("args", "seconds"), [([], 300.0),
                                               (["--timeout", "900"], 900.0)])
def test_timeout_reaches_every_command(runner: Runner, capsys: pytest.CaptureFixture[str],
                                       args: list[str], seconds: float) -> None:
    code, _, err = run_main(["report", "usage", *WINDOW, *args], capsys)
    assert code == 0, err
    assert runner.calls and {t for _, t in runner.calls} == {seconds}
    # the old fixed 60 s was too short for a month of a big site


def test_timeout_must_be_positive(runner: Runner, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main(["report", "usage", "--timeout", "0"], capsys)
    assert code == 2 and "Invalid value for '--timeout'" in err and runner.calls == []


def test_sacct_past_the_timeout_says_what_to_change(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str],
                                                    tmp_path: Path) -> None:
    """A real process that outlives --timeout (a stand-in `sacct` on PATH that sleeps): one
    line naming the timeout and what to change, exit 1, no traceback."""
    fake = tmp_path / "sacct"
    fake.write_text("#!/bin/sh\nexec sleep 30\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.setattr(report_cmd, "_backend",
                        lambda timeout_s: CommandBackend(SubprocessRunner(), timeout_s=timeout_s))
    code, out, err = run_main(["report", "fairness", "--since", "now-30days", "--timeout", "1"],
                              capsys)
    assert (code, out) == (1, "")
    assert err == ("hase: error: sacct did not answer within 1s (--timeout): a long window of a "
                   "busy cluster can take longer; allow more with --timeout SECONDS, or ask for "
                   "a shorter window than --since now-30days\n")


def test_help_says_what_the_options_are_for(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("usage", "fairness"):
        code, out, _ = run_main(["report", command, "--help"], capsys)
        text = " ".join(out.split())
        assert code == 0
        assert "--timeout FLOAT RANGE Seconds to wait for each Slurm command" in text
        assert "[default: 300.0; x>=1.0]" in text
        assert "--cluster TEXT Report this cluster of a multi-cluster Slurm database" in text
