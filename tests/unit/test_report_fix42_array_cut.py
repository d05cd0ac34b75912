"""Array task lists that Slurm cut. sacct(1) and squeue(1) print at most SLURM_BITSTR_LEN bytes
of a pending array's task list (64 unless set; 0: all of it) and end a longer one with
``...``: read whole, an irregular list of tasks cancelled before they ran counted one job.
The backend now runs every Slurm command with SLURM_BITSTR_LEN=0; a cut list that still
comes in is counted as far as it goes, with a warning."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from slurm_hase.reports.fairness import fairness_report
from slurm_hase.reports.format import usage_table
from slurm_hase.reports.queue import array_list_cut, array_tasks, with_queue
from slurm_hase.slurm.command_backend import SLURM_ENV
from slurm_hase.slurm.parse_json import parse_squeue_json
from slurm_hase.slurm.parse_json_sacct import task_ranges
from slurm_hase.slurm.parse_sacct_text import parse_sacct_parsable
from slurm_hase.slurm.runner import CommandResult, SubprocessRunner
from slurm_hase.slurm.types import JobState
from tests.conftest import slurm_capture

pytestmark = pytest.mark.usefixtures("utc")

# 199 tasks submitted, every third one ran: the other 133 were cancelled before they started
LEFT = [i for i in range(1, 200) if i % 3]


def _slurm_prints(tasks: Sequence[int], bitstr_len: int = 64, throttle: int = 0) -> str:
    """A task list as Slurm's xlate_array_task_str prints it (src/common/slurm_protocol_defs.c)
    for a list that is no single step: bit_fmt's ranges into `bitstr_len` bytes (a NUL
    included), the last three characters overwritten with dots when it fills them; 0: all."""
    text = task_ranges(tasks)
    if bitstr_len > 0:
        text = text[:bitstr_len - 1]
        if len(text) > bitstr_len - 3:
            text = text[:bitstr_len - 4] + "..."
    return text + (f"%{throttle}" if throttle else "")


def test_the_emulated_cut_is_slurms_shape() -> None:
    cut = _slurm_prints(LEFT)
    assert cut == "1-2,4-5,7-8,10-11,13-14,16-17,19-20,22-23,25-26,28-29,31-32,..."
    assert len(cut) == 63 and _slurm_prints(LEFT, 0).endswith(",196-197,199")


def test_a_cut_list_counts_what_it_shows_and_is_flagged() -> None:
    cut = f"11_[{_slurm_prints(LEFT)}]"
    assert array_list_cut(cut) and not array_list_cut(f"11_[{_slurm_prints(LEFT, 0)}]")
    assert array_tasks(cut) == 23  # 11 ranges of 2 shown, and at least one past the cut
    assert array_tasks(f"11_[{_slurm_prints(LEFT, 0)}]") == len(LEFT) == 133
    # the reviewer's list: tasks 1, 3, ..., 43 shown (22), the 43 may go on (431...)
    assert array_tasks("11_[1,3,5,7,9,11,13,15,17,19,21,23,25,27,29,31,33,35,37,39,41,43...]") == 22
    # a throttle follows the dots; a range cut in its upper end counts up to what shows
    assert array_tasks(f"11_[{_slurm_prints(LEFT, throttle=4)}]") == 23
    assert array_tasks("11_[1-2,100-150...]") == 2 + 51
    assert array_tasks("11_[1-2,100-10...]") == 2 + 1  # 100-10x: one task for sure
    assert array_tasks("10609_[...%3]") == 1  # sacct with SLURM_BITSTR_LEN=4
    assert not array_list_cut("11_[1-3]") and not array_list_cut("11_2")
    assert not array_list_cut("11")


def _cancelled_array(fixtures_dir: Path, tasks: str) -> str:
    """The 24.11 capture's sacct -P text, its pending array 11 cancelled before any task
    ran (as sacct shows it then: CANCELLED by 0, Start = End, no nodes) with task list
    `tasks`."""
    raw = slurm_capture(fixtures_dir, "24.11", "sacct-parsable.txt")
    pending = ("11_[1-3]|arr|teama|root|PENDING|0:0|2026-11-29T22:41:34|2026-11-29T22:41:36|"
               "Unknown|Unknown|0|")
    assert pending in raw
    return raw.replace(pending, f"11_[{tasks}]|arr|teama|root|CANCELLED by 0|0:0|"
                                "2026-11-29T22:41:34|2026-11-29T22:41:36|2026-11-29T23:00:00|"
                                "2026-11-29T23:00:00|0|")


def test_the_report_counts_a_cut_array_and_warns(fixtures_dir: Path) -> None:
    whole = fairness_report(parse_sacct_parsable(_cancelled_array(
        fixtures_dir, _slurm_prints(LEFT, 0))))
    teama = {r.account: r for r in whole.accounts}["teama"]
    assert (teama.jobs, teama.never_started) == (5 + 133, 133)  # its 5 jobs + the array
    assert whole.warnings == [] and whole.cut_arrays == []
    cut = fairness_report(parse_sacct_parsable(_cancelled_array(
        fixtures_dir, _slurm_prints(LEFT))))
    teama = {r.account: r for r in cut.accounts}["teama"]
    assert (teama.jobs, teama.never_started) == (5 + 23, 23)  # not 5 + 1
    assert cut.cut_arrays == [f"11_[{_slurm_prints(LEFT)}]"]
    assert cut.warnings == [
        "Slurm cut the task list of array 11 (sacct and squeue print 64 bytes of it unless "
        "SLURM_BITSTR_LEN=0, and end it with '...'): only the tasks it shows are counted, so "
        "its job counts are too low"]
    assert cut.as_dict()["cut_arrays"] == cut.cut_arrays
    assert usage_table(cut).splitlines()[-1] == f"warning: {cut.warnings[0]}"
    assert "warning" not in usage_table(whole)


def test_a_cut_squeue_array_is_counted_and_warned_of(fixtures_dir: Path) -> None:
    """squeue --json (24.11 capture): array 11's array_task_string cut as squeue cuts it."""
    data = json.loads(slurm_capture(fixtures_dir, "24.11", "squeue.json"))
    [array] = [j for j in data["jobs"] if j["array_task_string"] == "1-3"]
    array["array_task_string"] = _slurm_prints(LEFT)
    jobs = parse_squeue_json(json.dumps(data))
    records = parse_sacct_parsable(slurm_capture(fixtures_dir, "24.11", "sacct-parsable.txt"))
    rep = fairness_report(with_queue(records, jobs))
    teama = {r.account: r for r in rep.accounts}["teama"]
    assert teama.pending_now == 1 + 23  # the held job 10, and the array's tasks shown
    assert rep.cut_arrays == [f"11_[{_slurm_prints(LEFT)}]"]
    assert rep.warnings[-1].startswith("Slurm cut the task list of array 11 ")


def test_slurm_commands_run_with_task_lists_whole() -> None:
    assert SLURM_ENV == {"SLURM_TIME_FORMAT": "standard", "SLURM_BITSTR_LEN": "0", "TZ": "UTC"}


def test_the_command_sees_it_over_the_callers_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """A caller's SLURM_BITSTR_LEN=64 does not reach the command: the backend's env wins."""
    monkeypatch.setenv("SLURM_BITSTR_LEN", "64")
    shown = SubprocessRunner().run(["sh", "-c", 'printf %s "$SLURM_BITSTR_LEN"'], env=SLURM_ENV)
    assert (shown.returncode, shown.stdout) == (0, "0")
    plain = SubprocessRunner().run(["sh", "-c", 'printf %s "$SLURM_BITSTR_LEN"'])
    assert plain.stdout == "64"  # what sacct would have cut at


def test_the_cancelled_array_reads_as_never_started(fixtures_dir: Path) -> None:
    from slurm_hase.reports.fairness import started

    [array] = [r for r in parse_sacct_parsable(_cancelled_array(fixtures_dir, "1-3"))
               if r.job_id.startswith("11_")]
    assert (array.job_id, array.state, array.nodes) == ("11_[1-3]", JobState.CANCELLED, "")
    assert not started(array)


class RecordingRunner:
    """Answers each Slurm command the backend runs with a real capture; records its env."""

    def __init__(self, fixtures_dir: Path) -> None:
        self.fixtures_dir = fixtures_dir
        self.envs: list[tuple[str, Mapping[str, str] | None]] = []

    def _answer(self, argv: Sequence[str]) -> str:
        def cap(version: str, name: str) -> str:
            return slurm_capture(self.fixtures_dir, version, name)

        head = " ".join(argv[:3])
        if argv[0] == "sbatch":
            return "42\n"
        if argv[0] == "sacctmgr":
            if "format=account" in argv:
                return cap("local-24.11", "sacctmgr-accounts.txt")
            return cap("local-24.11", "sacctmgr-shares.txt")
        answers = {
            "sinfo --version": cap("24.11", "version.txt"),
            "squeue --json": cap("24.11", "squeue.json"),
            "scontrol show node": cap("24.11", "scontrol-show-node.txt"),
            "scontrol show partition": cap("local-24.11", "scontrol-show-partition.txt"),
            "scontrol show config": cap("24.11", "scontrol-show-config.txt"),
            "scontrol show job": cap("24.11", "scontrol-show-job.txt"),
        }
        if argv[0] == "sacct":
            return cap("local-24.11", "sacct-unit-separator.txt")
        return answers.get(head, "")

    def run(self, argv: Sequence[str], *, stdin: str | None = None,
            env: Mapping[str, str] | None = None, timeout_s: float = 60.0,
            cwd: str | None = None) -> CommandResult:
        self.envs.append((" ".join(argv[:2]), env))
        return CommandResult(tuple(argv), 0, self._answer(argv), "")


def test_every_command_the_backend_runs_gets_it(fixtures_dir: Path) -> None:
    from slurm_hase.slurm.command_backend import CommandBackend
    from slurm_hase.slurm.types import JobUpdate

    runner = RecordingRunner(fixtures_dir)
    backend = CommandBackend(runner)
    backend.version()
    backend.jobs()
    backend.job("5")
    backend.nodes()
    backend.partitions()
    backend.accounting(since="now-1day", until="now")
    backend.account_shares()
    backend.accounts()
    backend.scheduler_depths()
    backend.submit(["--wrap=true"])
    backend.update_job("5", JobUpdate(nice=10))
    for act in (backend.hold, backend.release, backend.requeue, backend.cancel):
        act("5")
    ran = {name for name, _ in runner.envs}
    assert {"sinfo --version", "squeue --json", "scontrol show", "sacct -a", "sacctmgr show",
            "sbatch --parsable", "scontrol update", "scontrol hold", "scontrol release",
            "scontrol requeue", "scancel 5"} <= ran
    assert all(env is not None and env.get("SLURM_BITSTR_LEN") == "0" for _, env in runner.envs)
    assert all(env is not None and env.get("TZ") == "UTC" for _, env in runner.envs)  # DST
