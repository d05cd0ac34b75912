"""CommandBackend against a fake Runner that replays real captured output and real errors."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from slurm_hase.errors import (
    JobNotFoundError,
    SlurmCommandError,
    SlurmError,
    SlurmParseError,
    SlurmUnavailableError,
)
from slurm_hase.slurm import commands
from slurm_hase.slurm.backend import SlurmBackend
from slurm_hase.slurm.command_backend import CommandBackend
from slurm_hase.slurm.parse_text import parse_show_config
from slurm_hase.slurm.runner import CommandResult
from slurm_hase.slurm.types import JobState, JobUpdate, SchedulerDepths
from tests.conftest import slurm_capture


class FakeRunner:
    """Answers argv (exact match) with scripted (rc, stdout, stderr); records every call."""

    def __init__(self, answers: Mapping[tuple[str, ...], tuple[int, str, str]]) -> None:
        self.answers = dict(answers)
        self.calls: list[tuple[tuple[str, ...], str | None]] = []
        self.envs: list[Mapping[str, str] | None] = []

    def run(self, argv: Sequence[str], *, stdin: str | None = None,
            env: Mapping[str, str] | None = None, timeout_s: float = 60.0,
            cwd: str | None = None) -> CommandResult:
        key = tuple(argv)
        self.calls.append((key, stdin))
        self.envs.append(env)
        if key not in self.answers:
            raise AssertionError(f"unexpected command {key}")
        rc, out, err = self.answers[key]
        return CommandResult(key, rc, out, err)


pytestmark = pytest.mark.usefixtures("utc")


LOCAL = ["local-22.05", "local-24.11"]  # captured from this project's local cluster


def cap(fixtures_dir: Path, version: str, name: str) -> str:
    return slurm_capture(fixtures_dir, version, name)


def ok(out: str) -> tuple[int, str, str]:
    return (0, out, "")


def replay(fixtures_dir: Path, v: str) -> FakeRunner:
    config = cap(fixtures_dir, v, "scontrol-show-config.txt")
    name = parse_show_config(config)["ClusterName"]  # hase (22.05), hase24 (24.11)
    return FakeRunner({
        tuple(commands.version()): ok(cap(fixtures_dir, v, "version.txt")),
        tuple(commands.show_config()): ok(config),
        tuple(commands.squeue_json()): ok(cap(fixtures_dir, v, "squeue.json")),
        tuple(commands.show_nodes()): ok(cap(fixtures_dir, v, "scontrol-show-node.txt")),
        tuple(commands.show_partitions()): ok(
            cap(fixtures_dir, f"local-{v}", "scontrol-show-partition.txt")),
        tuple(commands.sacctmgr_shares(name)): ok(
            cap(fixtures_dir, f"local-{v}", "sacctmgr-shares.txt")),
    })


@pytest.mark.parametrize("v", ["22.05", "24.11"])
def test_reads_through_the_backend(fixtures_dir: Path, v: str) -> None:
    runner = replay(fixtures_dir, v)
    backend: SlurmBackend = CommandBackend(runner)
    jobs = {j.name: j for j in backend.jobs()}
    assert "done-a100" not in jobs and jobs["held"].held and jobs["untyped"].nice == 10
    assert {n.name: n.gpus_alloc for n in backend.nodes()}["v100-1"] == {"v100": 2}
    assert [p.name for p in backend.partitions()] == ["gpu", "debug"]
    # root's own user (root||root|1) sits beside teama and teamb: its part is root's
    assert backend.account_shares() == {"root": 1.0, "teama": 60.0, "teamb": 40.0}
    assert runner.calls[0][0] == ("squeue", "--json")  # no version probe needed for reads
    # times come in the form the parsers read, whatever SLURM_TIME_FORMAT the caller has, in
    # UTC whatever TZ, and array task lists whole, whatever SLURM_BITSTR_LEN (sacct and squeue
    # cut them at 64 bytes)
    assert all(env == {"SLURM_TIME_FORMAT": "standard", "SLURM_BITSTR_LEN": "0", "TZ": "UTC"}
               for env in runner.envs)


@pytest.mark.parametrize("v", ["22.05", "24.11"])
def test_shares_are_of_this_cluster_asked_once(fixtures_dir: Path, v: str) -> None:
    """sacctmgr lists every cluster of a shared database: the shares are asked for this
    cluster's ClusterName (scontrol show config, once per backend), or the one named."""
    runner = replay(fixtures_dir, v)
    backend = CommandBackend(runner)
    first, again = backend.account_shares(), backend.account_shares()
    assert first == again == {"root": 1.0, "teama": 60.0, "teamb": 40.0}
    name = {"22.05": "hase", "24.11": "hase24"}[v]
    assert [c[0] for c in runner.calls] == [tuple(commands.show_config()),
                                            tuple(commands.sacctmgr_shares(name)),
                                            tuple(commands.sacctmgr_shares(name))]
    named = FakeRunner({tuple(commands.sacctmgr_shares("other")): ok("teama|root||5\n")})
    assert CommandBackend(named).account_shares("other") == {"teama": 5.0}
    assert [c[0] for c in named.calls] == [tuple(commands.sacctmgr_shares("other"))]


def test_shares_of_every_cluster_when_the_config_names_none() -> None:
    """A config without ClusterName (or "(null)"): sacctmgr is asked without a cluster."""
    for config in ("SlurmctldPort = 6817\n", "ClusterName = (null)\n"):
        runner = FakeRunner({tuple(commands.show_config()): ok(config),
                             tuple(commands.sacctmgr_shares()): ok("teama|root||5\n")})
        backend = CommandBackend(runner)
        assert backend.account_shares() == {"teama": 5.0} and backend.cluster_name() is None
        assert backend.account_shares() == {"teama": 5.0}
        assert [c[0] for c in runner.calls].count(tuple(commands.show_config())) == 1


@pytest.mark.parametrize("local", LOCAL)
def test_accounts_lists_root_which_the_shares_leave_out(fixtures_dir: Path, local: str) -> None:
    """With slurmctld down (no ClusterName to ask): every account of the database."""
    down = (1, "", cap(fixtures_dir, local, "scontrol-show-node-controller-down.stderr"))
    listed = tuple(commands.sacctmgr_accounts())
    runner = FakeRunner({tuple(commands.show_config()): down,
                         listed: ok(cap(fixtures_dir, local, "sacctmgr-accounts.txt"))})
    assert CommandBackend(runner).accounts() == {"root", "teama", "teamb"}
    assert [c[0] for c in runner.calls] == [tuple(commands.show_config()), listed]


def test_accounts_are_this_clusters_associations(fixtures_dir: Path) -> None:
    """`sacctmgr show assoc cluster=hase format=account` (a line per association) of the
    ClusterName scontrol gives, or of the cluster named."""
    raw = cap(fixtures_dir, "local-22.05", "sacctmgr-assoc-accounts.txt")
    runner = FakeRunner({tuple(commands.show_config()): ok("ClusterName = hase\n"),
                         tuple(commands.sacctmgr_accounts("hase")): ok(raw),
                         tuple(commands.sacctmgr_accounts("west")): ok("root\nwestonly\n")})
    backend = CommandBackend(runner)
    assert backend.accounts() == {"root", "teama", "teamb"}
    assert backend.accounts("west") == {"root", "westonly"}
    assert "cluster=hase" in runner.calls[1][0] and "assoc" in runner.calls[1][0]


def test_version_is_detected_once_and_lazily(fixtures_dir: Path) -> None:
    runner = replay(fixtures_dir, "24.11")
    backend = CommandBackend(runner)
    assert runner.calls == []
    assert backend.version_tuple() == (24, 11) and backend.version() == "24.11.5"
    assert [c[0] for c in runner.calls] == [("sinfo", "--version")]
    pinned = CommandBackend(FakeRunner({}), version=(22, 5))
    assert pinned.version_tuple() == (22, 5) and pinned.version() == "22.05"


@pytest.mark.parametrize("local", LOCAL)
def test_accounting_reads_real_unit_separated_sacct(fixtures_dir: Path, local: str) -> None:
    raw = cap(fixtures_dir, local, "sacct-unit-separator.txt")  # capture-local.sh, as asked
    header, *lines = raw.splitlines()
    ids = [line.split("\x1f", 1)[0] for line in lines]
    argv = tuple(commands.sacct_parsable(job_ids=ids))
    assert "\x1f" in header and header.split("\x1f") == argv[argv.index("-o") + 1].split(",")
    recs = {r.name: r for r in CommandBackend(FakeRunner({argv: ok(raw)})).accounting(job_ids=ids)}
    assert sorted(recs) == ["sep-a100", "sep-fail", "sep-mps", "sep-pipe"]
    assert recs["sep-a100"].state is JobState.COMPLETED and recs["sep-a100"].alloc_gpus == {"a100": 1}
    assert recs["sep-fail"].state is JobState.FAILED and recs["sep-fail"].exit_code == "3:0"
    assert recs["sep-mps"].alloc_tres.get("gres/mps") == "50" and recs["sep-mps"].alloc_gpus == {}
    pipe = recs["sep-pipe"]  # '|' inside fields: why the backend asks for \x1f
    assert pipe.constraints == "a100|v100" and '"note":"a|b"' in pipe.comment
    assert all(r.account in ("teama", "teamb") and r.end_time for r in recs.values())


def test_accounting_uses_unit_separator(fixtures_dir: Path) -> None:
    raw = cap(fixtures_dir, "22.05", "sacct-parsable.txt").replace("|", "\x1f")
    argv = tuple(commands.sacct_parsable(since="now-2hours", until="now"))
    backend = CommandBackend(FakeRunner({argv: ok(raw)}))
    recs = {r.name: r for r in backend.accounting(since="now-2hours")}
    assert recs["fail-v100"].exit_code == "3:0" and recs["done-t4"].alloc_gpus == {"t4": 2}


def test_submit_returns_job_id_and_sends_script_on_stdin() -> None:
    argv = ("sbatch", "--parsable", "-J", "x y", "-A", "teama")
    runner = FakeRunner({argv: ok("17\n")})
    assert CommandBackend(runner).submit(["-J", "x y", "-A", "teama"], "#!/bin/sh\ntrue\n") == "17"
    assert runner.calls == [(argv, "#!/bin/sh\ntrue\n")]
    fed = FakeRunner({("sbatch", "--parsable"): ok("18;hase\n")})
    assert CommandBackend(fed).submit([]) == "18"
    with pytest.raises(SlurmParseError):
        CommandBackend(FakeRunner({("sbatch", "--parsable"): ok("Submitted\n")})).submit([])


def test_update_job_skips_empty_and_runs_set_fields() -> None:
    runner = FakeRunner({("scontrol", "update", "jobid=9", "Nice=10", "Features=volta"): ok("")})
    backend = CommandBackend(runner)
    backend.update_job("9", JobUpdate())
    assert runner.calls == []
    backend.update_job("9", JobUpdate(nice=10, features="volta"))
    assert len(runner.calls) == 1


@pytest.mark.parametrize("local", LOCAL)
@pytest.mark.parametrize(
    ("argv", "stderr_file", "method"),
    [
        (("scontrol", "update", "jobid=999999", "Nice=5"), "scontrol-update-invalid-job.stderr",
         lambda b: b.update_job("999999", JobUpdate(nice=5))),
        (("scontrol", "hold", "999999"), "scontrol-hold-invalid-job.stderr",
         lambda b: b.hold("999999")),
        (("scontrol", "requeue", "999999"), "scontrol-requeue-invalid-job.stderr",
         lambda b: b.requeue("999999")),
        (("scontrol", "update", "jobid=999999", "Nice=5"), "scontrol-update-finished-job.stderr",
         lambda b: b.update_job("999999", JobUpdate(nice=5))),
    ],
)
def test_vanished_job_raises_job_not_found(fixtures_dir: Path, local: str, argv: tuple[str, ...],
                                           stderr_file: str, method: object) -> None:
    err = cap(fixtures_dir, local, stderr_file)
    backend = CommandBackend(FakeRunner({argv: (1, "", err)}))
    with pytest.raises(JobNotFoundError) as info:
        method(backend)  # type: ignore[operator]
    assert info.value.job_id == "999999"


@pytest.mark.parametrize(
    ("argv", "stderr_file", "call"),
    [
        (("scontrol", "update", "jobid=1", "Nice=1"), "scontrol-update-controller-down.stderr",
         lambda b: b.update_job("1", JobUpdate(nice=1))),
        (tuple(commands.show_nodes()), "scontrol-show-node-controller-down.stderr",
         lambda b: b.nodes()),
        (("sbatch", "--parsable", "--wrap", "true"), "sbatch-controller-down.stderr",
         lambda b: b.submit(["--wrap", "true"])),
        (tuple(commands.version()), "sinfo-version-no-config.stderr", lambda b: b.version()),
    ],
)
@pytest.mark.parametrize("local", LOCAL)
def test_controller_down_raises_unavailable(fixtures_dir: Path, local: str, argv: tuple[str, ...],
                                            stderr_file: str, call: object) -> None:
    err = cap(fixtures_dir, local, stderr_file)
    backend = CommandBackend(FakeRunner({argv: (1, "", err)}))
    with pytest.raises(SlurmUnavailableError) as info:
        call(backend)  # type: ignore[operator]
    assert info.value.argv == list(argv) and info.value.stderr


def test_squeue_json_controller_down_on_24_11_is_unavailable(fixtures_dir: Path) -> None:
    err = cap(fixtures_dir, "local-24.11", "squeue-controller-down.stderr")  # exit 1, no JSON
    backend = CommandBackend(FakeRunner({("squeue", "--json"): (1, "", err)}))
    with pytest.raises(SlurmUnavailableError, match="Unable to contact slurm controller"):
        backend.jobs()


def test_squeue_json_exit_0_with_errors_inside_is_unavailable(fixtures_dir: Path) -> None:
    raw = cap(fixtures_dir, "local-22.05", "squeue-controller-down.json")
    backend = CommandBackend(FakeRunner({("squeue", "--json"): ok(raw)}))
    with pytest.raises(SlurmUnavailableError, match="Failed while looking for jobs"):
        backend.jobs()


@pytest.mark.parametrize(("local", "printed"), [("local-22.05", 4185143296),
                                               ("local-24.11", -109824000)])
def test_negative_nice_reads_as_squeue_text_shows_it(fixtures_dir: Path, local: str,
                                                     printed: int) -> None:
    # 22.05's squeue --json prints Nice -109824000 (what the daemon sets) as 4185143296, 24.11's
    # as it is; the same two jobs' Nice from squeue -o "%i %y" in the same capture is the truth
    raw = cap(fixtures_dir, local, "squeue-nice.json")
    assert f'"nice": {printed}' in raw
    shown = dict(line.split() for line in
                 cap(fixtures_dir, local, "squeue-nice-text.txt").splitlines())
    backend = CommandBackend(FakeRunner({("squeue", "--json"): ok(raw)}))
    read = {j.job_id: j.nice for j in backend.jobs() if j.job_id in shown}
    assert read == {jid: int(nice) for jid, nice in shown.items()}
    assert sorted(read.values()) == [-109824000, 7]


class SlurmdbdDown:
    """sacct and sacctmgr fail as they did with slurmdbd down (captured stderr, exit 1);
    slurmctld still answers scontrol."""

    def __init__(self, fixtures_dir: Path, local: str) -> None:
        self.err = {cmd: cap(fixtures_dir, local, name) for cmd, name in (
            ("sacct", "sacct-slurmdbd-down.stderr"),
            ("sacctmgr", "sacctmgr-shares-slurmdbd-down.stderr"))}
        self.config = cap(fixtures_dir, "22.05", "scontrol-show-config.txt")

    def run(self, argv: Sequence[str], *, stdin: str | None = None,
            env: Mapping[str, str] | None = None, timeout_s: float = 60.0,
            cwd: str | None = None) -> CommandResult:
        if list(argv) == commands.show_config():
            return CommandResult(tuple(argv), 0, self.config, "")
        return CommandResult(tuple(argv), 1, "", self.err[argv[0]])


@pytest.mark.parametrize("local", LOCAL)
def test_slurmdbd_down_is_unavailable_for_sacct_and_sacctmgr(fixtures_dir: Path,
                                                              local: str) -> None:
    # what the daemon's ledger seeding, history and shares meet (daemon/loop.py carries on)
    backend = CommandBackend(SlurmdbdDown(fixtures_dir, local), version=(22, 5))
    with pytest.raises(SlurmUnavailableError, match="Problem talking to the database"):
        backend.accounting(since="now-1days")
    with pytest.raises(SlurmUnavailableError, match="Connection refused"):
        backend.account_shares()
    with pytest.raises(SlurmUnavailableError, match="Connection refused"):
        backend.accounts()


def test_other_failures_are_command_errors_with_argv_and_stderr() -> None:
    argv = ("scontrol", "update", "jobid=3", "TresPerJob=gres:gpu:v100:1")
    err = "Invalid GRES specification (with and without type identification)"
    backend = CommandBackend(FakeRunner({argv: (1, "", err)}))
    with pytest.raises(SlurmCommandError) as info:
        backend.update_job("3", JobUpdate(tres_per_job="gres:gpu:v100:1"))
    assert type(info.value) is SlurmCommandError
    assert info.value.argv == list(argv) and info.value.stderr == err
    assert info.value.returncode == 1


@pytest.mark.parametrize("v", ["22.05", "24.11"])
def test_scheduler_depths_from_show_config(fixtures_dir: Path, v: str) -> None:
    # both captured clusters leave SchedulerParameters unset: Slurm's defaults
    runner = FakeRunner({tuple(commands.show_config()): ok(cap(fixtures_dir, v, "scontrol-show-config.txt"))})
    assert CommandBackend(runner).scheduler_depths() == SchedulerDepths(backfill=500, main=100)
    assert runner.calls == [(("scontrol", "show", "config"), None)]


def test_scheduler_depths_follow_scheduler_parameters(fixtures_dir: Path) -> None:
    real = cap(fixtures_dir, "24.11", "scontrol-show-config.txt")
    tuned = real.replace("SchedulerParameters     = (null)",
                         "SchedulerParameters     = bf_continue,bf_max_job_test=5000,default_queue_depth=250")
    assert tuned != real
    backend = CommandBackend(FakeRunner({tuple(commands.show_config()): ok(tuned)}))
    assert backend.scheduler_depths() == SchedulerDepths(backfill=5000, main=250)
    builtin = real.replace("SchedulerType           = sched/backfill", "SchedulerType           = sched/builtin")
    assert builtin != real
    backend = CommandBackend(FakeRunner({tuple(commands.show_config()): ok(builtin)}))
    assert backend.scheduler_depths() == SchedulerDepths(backfill=0, main=100)
    bad = real.replace("SchedulerParameters     = (null)", "SchedulerParameters     = bf_max_job_test=lots")
    backend = CommandBackend(FakeRunner({tuple(commands.show_config()): ok(bad)}))
    with pytest.raises(SlurmParseError, match="bf_max_job_test='lots'"):
        backend.scheduler_depths()


@pytest.mark.parametrize("local", LOCAL)
def test_shares_with_slurmctld_down_read_the_one_cluster(fixtures_dir: Path, local: str) -> None:
    """scontrol cannot say ClusterName (captured stderr of a down slurmctld): sacctmgr's
    associations of every cluster are read; one cluster gives its shares, several a
    SlurmError naming them, and the name is asked again next time."""
    down = (1, "", cap(fixtures_dir, local, "scontrol-show-node-controller-down.stderr"))
    one = "hase|root|||1\nhase|teama|root||60\nhase|teama||alice|1\nhase|teamb|root||40\n"
    runner = FakeRunner({tuple(commands.show_config()): down,
                         tuple(commands.sacctmgr_shares_by_cluster()): ok(one)})
    backend = CommandBackend(runner)
    assert backend.account_shares() == {"teama": 60.0, "teamb": 40.0}
    runner.answers[tuple(commands.sacctmgr_shares_by_cluster())] = ok(
        one + "other|root|||1\nother|teama|root||5\n")
    with pytest.raises(SlurmError, match="holds clusters hase, other and slurmctld is not "
                                         "answering .* name it \\(--cluster\\)"):
        backend.account_shares()
    assert [c[0] for c in runner.calls].count(tuple(commands.show_config())) == 2
