"""Several simulation runs (policies x seeds) at once in worker processes: `hase simulate
--workers N`. Each run is the same deterministic simulate() as in one process, so the results
are the same; only the order in which runs finish differs."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_hase.sim.cluster import ClusterSpec
from slurm_hase.sim.engine import SimConfig, SimResult, simulate
from slurm_hase.sim.metrics import account_metrics, compute
from slurm_hase.sim.report import refused_count, write_outputs
from slurm_hase.sim.throughput import ThroughputTable
from slurm_hase.sim.traces import TraceJob

RunKey = tuple[int, str]  # (seed, policy)


@dataclass(frozen=True)
class RunTask:
    """One policy's run on one seed's jobs, written into `out`."""

    key: RunKey
    jobs: Sequence[TraceJob]
    spec: ClusterSpec
    table: ThroughputTable
    config: SimConfig
    out: Path
    meta: Mapping[str, Any]
    # hand the SimResult back (the plots need it); False: only the metrics and files travel
    # back from a worker, not every job's record
    keep_result: bool = True


@dataclass(frozen=True)
class RunDone:
    """What a run produced: the result (for the plots; None where the task did not keep it),
    its metrics and the files written."""

    key: RunKey
    result: SimResult | None
    metrics: dict[str, Any]
    written: list[Path]
    out: Path  # the folder the files are in
    jobs: int  # how many jobs were simulated


def run_task(task: RunTask, progress: Callable[[int], None] | None = None) -> RunDone:
    """Simulate, compute the metrics and write the run's files."""
    result = simulate(task.jobs, task.spec, task.table, task.config, progress=progress)
    metrics = {**compute(result), "refused": refused_count(result),
               "by_account": account_metrics(result)}
    written = write_outputs(task.out, task.config.policy, result, metrics, task.meta)
    return RunDone(task.key, result if task.keep_result else None, metrics, written, task.out,
                   len(result.jobs))


def run_parallel(tasks: Iterable[RunTask], workers: int) -> Iterator[RunDone]:
    """Run `tasks` in `workers` processes, yielding each run as it finishes. Tasks are taken
    from `tasks` only as a worker frees up (a lazy iterable keeps few seeds' jobs in memory).
    A run that fails raises its error here; the runs not started yet are cancelled."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    queue = iter(tasks)
    # forkserver: workers fork from a fresh single-threaded server that has imported the
    # simulator once (forking this process, whose pool runs a thread, may deadlock a child;
    # Python 3.12+ warns of it); each task's jobs travel to its worker pickled
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        running: set[Future[RunDone]] = set()

        def top_up() -> None:
            while len(running) < workers and (task := next(queue, None)) is not None:
                running.add(pool.submit(run_task, task))

        top_up()
        try:
            while running:
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    running.discard(future)
                    yield future.result()
                top_up()
        finally:
            for future in running:
                future.cancel()
