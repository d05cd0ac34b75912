"""CommandBackend names an array task as ARRAY_TASK: the task that started last has the array's
own id as its JobId, and `scontrol requeue <that id>` requeued every task of the array. Real
capture: `squeue --json` of the 22.05 local cluster with array 1969 (tasks 1 and 2) running, task
2 with JobId 1969 (it holds recently finished jobs too, two of them with Latin-1 names)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hase.slurm import commands
from slurm_hase.slurm.command_backend import CommandBackend
from slurm_hase.slurm.types import JobUpdate
from tests.unit.test_slurm_command_backend import FakeRunner, ok

CAPTURE = Path("slurm") / "local-22.05" / "squeue-array-running.json"


@pytest.fixture()
def squeue(fixtures_dir: Path) -> str:
    # decoded as the runner decodes Slurm's bytes (a Latin-1 job name comes back as surrogates)
    return (fixtures_dir / CAPTURE).read_bytes().decode("utf-8", "surrogateescape")


def _backend(squeue: str) -> tuple[CommandBackend, FakeRunner]:
    answers = {tuple(commands.squeue_json()): ok(squeue)}
    for argv in (commands.requeue("1969_2"), commands.hold("1969_2"), commands.release("1969_2"),
                 commands.cancel("1969_2"), commands.requeue("1969_1"), commands.requeue("42"),
                 commands.update_job("1969_2", JobUpdate(nice=5))):
        answers[tuple(argv)] = ok("")
    runner = FakeRunner(answers)
    return CommandBackend(runner, version=(22, 5)), runner


def test_the_task_with_the_arrays_id_is_named_array_task(squeue: str) -> None:
    backend, runner = _backend(squeue)
    tasks = {j.job_id: j for j in backend.jobs() if j.array_job_id == "1969"}
    assert {(i, j.array_task_id, j.address) for i, j in tasks.items()} == {
        ("1969", "2", "1969_2"), ("1970", "1", "1969_1")}
    backend.requeue("1969")
    backend.hold("1969")
    backend.release("1969")
    backend.update_job("1969", JobUpdate(nice=5))
    backend.cancel("1969")
    backend.requeue("1970")  # the other task, by its own JobId: addressed the same way
    sent = [call[0] for call in runner.calls[1:]]
    assert sent == [tuple(commands.requeue("1969_2")), tuple(commands.hold("1969_2")),
                    tuple(commands.release("1969_2")),
                    tuple(commands.update_job("1969_2", JobUpdate(nice=5))),
                    tuple(commands.cancel("1969_2")), tuple(commands.requeue("1969_1"))]


def test_a_job_not_in_an_array_keeps_its_id(squeue: str) -> None:
    backend, runner = _backend(squeue)
    backend.jobs()
    backend.requeue("42")  # never seen: its own id
    assert runner.calls[-1][0] == tuple(commands.requeue("42"))
