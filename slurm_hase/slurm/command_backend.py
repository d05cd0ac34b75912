"""SlurmBackend over Slurm's own commands (squeue, scontrol, sacct, sbatch...) via a Runner.

Reads: jobs from ``squeue --json`` (finished jobs dropped, as 22.05 lists them), nodes and
partitions from ``scontrol show ... -o`` (same shape on every version), accounting from
``sacct -P`` with an unambiguous delimiter (22.05's JSON loses exit codes), shares from sacctmgr.
Every command runs with SLURM_ENV, TZ=UTC among it: the times Slurm prints and reads are UTC.
"""

from __future__ import annotations

from collections.abc import Sequence

from slurm_hase.errors import (
    JobNotFoundError,
    SlurmCommandError,
    SlurmError,
    SlurmParseError,
    SlurmUnavailableError,
)
from slurm_hase.slurm import commands
from slurm_hase.slurm.parse_json import parse_squeue_json, reported_errors
from slurm_hase.slurm.parse_sacct_text import parse_sacct_parsable, parse_sacctmgr_accounts
from slurm_hase.slurm.parse_shares import parse_sacctmgr_shares, split_by_cluster
from slurm_hase.slurm.parse_text import (
    parse_scontrol_jobs,
    parse_scontrol_nodes,
    parse_scontrol_partitions,
    parse_show_config,
    parse_version,
    scheduler_depths,
)
from slurm_hase.slurm.runner import CommandResult, Runner
from slurm_hase.slurm.types import (
    AccountingRecord,
    Job,
    JobState,
    JobUpdate,
    Node,
    Partition,
    SchedulerDepths,
)

UNAVAILABLE_MARKERS = (
    "Unable to contact slurm controller",
    "Socket timed out",
    "Connection refused",
    "Could not establish a configuration source",
    "Unable to establish connection",
    "Problem talking to the database",
    "Zero Bytes were transmitted or received",
    "Unexpected message received",  # 22.05 scontrol update/hold with slurmctld down
    "Failed while looking for",  # 22.05 squeue/sinfo --json: exit 0, the error in the JSON
)
NOT_FOUND_MARKERS = (
    "Invalid job id specified",
    "Job/step already completing or completed",
    "Job has already finished",
)
FINISHED = frozenset({
    JobState.COMPLETED, JobState.CANCELLED, JobState.FAILED, JobState.TIMEOUT,
    JobState.NODE_FAIL, JobState.PREEMPTED, JobState.OUT_OF_MEMORY, JobState.BOOT_FAIL,
    JobState.DEADLINE,
})


def classify_failure(result: CommandResult, job_id: str | None = None) -> Exception:
    """The typed error for a failed command, judged by its stderr."""
    err = result.stderr
    if job_id is not None and any(m.lower() in err.lower() for m in NOT_FOUND_MARKERS):
        return JobNotFoundError(job_id)
    if any(m.lower() in err.lower() for m in UNAVAILABLE_MARKERS):
        return SlurmUnavailableError(list(result.argv), result.returncode, err)
    return SlurmCommandError(list(result.argv), result.returncode, err)


def live_jobs(jobs: Sequence[Job]) -> list[Job]:
    """Jobs that still pend or run (what squeue shows by default on every version)."""
    return [j for j in jobs if j.state not in FINISHED]


# Slurm's commands print times in the caller's SLURM_TIME_FORMAT ("relative", "%s", ...); the
# parsers read ISO 8601 (parse_text.parse_utc_time), so every command runs with "standard".
# They print and read those times as local wall-clock time (localtime()/mktime(), so TZ rules):
# in the autumn hour that daylight saving time repeats a local stamp names two instants, and a
# spring one may name none. TZ=UTC makes every stamp Slurm prints, and every one hase passes
# (reports.window.stamp for sacct -S/-E), one instant. SLURM_BITSTR_LEN 0: array task ids uncut.
SLURM_ENV = {"SLURM_TIME_FORMAT": "standard", "SLURM_BITSTR_LEN": "0", "TZ": "UTC"}


class CommandBackend:
    """SlurmBackend that runs Slurm's commands through `runner`."""

    def __init__(
        self, runner: Runner, *, version: tuple[int, int] | None = None, timeout_s: float = 60.0
    ) -> None:
        self.runner = runner
        self.timeout_s = timeout_s
        self._version = version
        self._version_text = f"{version[0]}.{version[1]:02d}" if version else None
        self._cluster_name: str | None = None
        self._cluster_known = False
        # job id -> Job.address of the array tasks the last jobs()/job() saw: the commands that
        # act on one job name an array task as ARRAY_TASK, never by a bare id naming them all
        self._addresses: dict[str, str] = {}

    def _address(self, job_id: str) -> str:
        return self._addresses.get(job_id, job_id)

    def _remember(self, jobs: Sequence[Job], *, replace: bool) -> None:
        found = {j.job_id: a for j in jobs if (a := j.address) != j.job_id}
        if replace:
            self._addresses = found
        else:
            self._addresses.update(found)

    def _run(self, argv: Sequence[str], *, stdin: str | None = None,
             job_id: str | None = None) -> str:
        result = self.runner.run(argv, stdin=stdin, env=SLURM_ENV, timeout_s=self.timeout_s)
        if result.returncode != 0:
            raise classify_failure(result, job_id)
        return result.stdout

    def _run_json(self, argv: Sequence[str]) -> str:
        """Run a --json command; errors Slurm reports inside the JSON become typed errors."""
        out = self._run(argv)
        errors = reported_errors(out)
        if errors:
            raise classify_failure(CommandResult(tuple(argv), 0, out, "; ".join(errors)))
        return out

    def _detect(self) -> None:
        parsed = parse_version(self._run(commands.version()))
        self._version, self._version_text = parsed.tuple, parsed.text

    def version(self) -> str:
        """Slurm's version, e.g. ``22.05.8`` (asked once, lazily)."""
        if self._version_text is None:
            self._detect()
        assert self._version_text is not None
        return self._version_text

    def version_tuple(self) -> tuple[int, int]:
        """(major, minor), e.g. (22, 5)."""
        if self._version is None:
            self._detect()
        assert self._version is not None
        return self._version

    def jobs(self) -> list[Job]:
        """Pending and running jobs."""
        jobs = live_jobs(parse_squeue_json(self._run_json(commands.squeue_json())))
        self._remember(jobs, replace=True)
        return jobs

    def job(self, job_id: str) -> Job:
        """One job from ``scontrol show job``; JobNotFoundError if slurmctld forgot it."""
        address = self._address(job_id)
        if "[" in address:  # an array's pending tasks: `show job` takes no task list (22.05)
            address = job_id
        found = parse_scontrol_jobs(self._run(commands.show_jobs(address), job_id=job_id))
        # a bare array id lists every task of the array: the one asked for has that JobId
        job = next((j for j in found if j.job_id == job_id), None)
        if job is None:
            raise JobNotFoundError(job_id)
        self._remember([job], replace=False)
        return job

    def nodes(self) -> list[Node]:
        return parse_scontrol_nodes(self._run(commands.show_nodes()))

    def partitions(self) -> list[Partition]:
        return parse_scontrol_partitions(self._run(commands.show_partitions()))

    def accounting(
        self, *, since: str = "now-1day", until: str = "now", job_ids: Sequence[str] = (),
        cluster: str | None = None,
    ) -> list[AccountingRecord]:
        """sacct allocations in a window (or for `job_ids`, window ignored), of `cluster` (one
        name) or else of this cluster. `since`/`until` in sacct's forms, a date and time in UTC
        (reports.window.stamp), or relative (``now-1day``)."""
        argv = commands.sacct_parsable(since=since, until=until, job_ids=job_ids, cluster=cluster)
        return parse_sacct_parsable(self._run(argv), delimiter=commands.SACCT_DELIMITER)

    def account_shares(self, cluster: str | None = None) -> dict[str, float]:
        """Each account's part of the share tree of `cluster`, or else of this cluster
        (sacctmgr lists every cluster's associations of a shared database: another cluster's
        account of the same name would overwrite this one's share)."""
        if cluster:
            return parse_sacctmgr_shares(self._run(commands.sacctmgr_shares(cluster)))
        try:
            name = self.cluster_name()
        except SlurmUnavailableError:  # slurmctld down; slurmdbd may still answer
            return self._only_cluster_shares()
        return parse_sacctmgr_shares(self._run(commands.sacctmgr_shares(name)))

    def _only_cluster_shares(self) -> dict[str, float]:
        """The shares of the database's one cluster; SlurmError when it holds several (which
        is this one, only slurmctld's config says)."""
        by_cluster = split_by_cluster(self._run(commands.sacctmgr_shares_by_cluster()))
        if len(by_cluster) > 1:
            raise SlurmError(f"Slurm's database holds clusters {', '.join(sorted(by_cluster))} "
                             "and slurmctld is not answering to say which is this one: name "
                             "it (--cluster)")
        return parse_sacctmgr_shares(next(iter(by_cluster.values()), ""))

    def cluster_name(self) -> str | None:
        """This cluster's ClusterName (``scontrol show config``, asked once); None when the
        config does not say."""
        if not self._cluster_known:
            name = parse_show_config(self._run(commands.show_config())).get("ClusterName", "")
            self._cluster_name = name if name and name != "(null)" else None
            self._cluster_known = True
        return self._cluster_name

    def accounts(self, cluster: str | None = None) -> set[str]:
        """The accounts with an association on `cluster`, or else on this cluster (root
        included; a slurmdbd may serve several clusters), or with slurmctld down (no
        ClusterName to ask) every account in Slurm's database."""
        if not cluster:
            try:
                cluster = self.cluster_name()
            except SlurmUnavailableError:
                cluster = None
        return parse_sacctmgr_accounts(self._run(commands.sacctmgr_accounts(cluster)))

    def scheduler_depths(self) -> SchedulerDepths:
        """How deep slurmctld's main and backfill passes look (``scontrol show config``)."""
        return scheduler_depths(parse_show_config(self._run(commands.show_config())))

    def submit(self, args: Sequence[str], script: str | None = None) -> str:
        """sbatch; returns the new job id. Times in `args` (--begin) are UTC, and the job gets
        SLURM_ENV (TZ=UTC) in its environment: user jobs go through hsbatch instead."""
        out = self._run(commands.sbatch(args), stdin=script).strip()
        job_id = out.splitlines()[-1].split(";")[0].strip() if out else ""
        if not job_id.isdigit():
            raise SlurmParseError("sbatch --parsable", f"no job id in {out!r}")
        return job_id

    def update_job(self, job_id: str, update: JobUpdate) -> None:
        """scontrol update; an empty update runs nothing."""
        if update.is_empty():
            return
        self._run(commands.update_job(self._address(job_id), update), job_id=job_id)

    def hold(self, job_id: str) -> None:
        self._run(commands.hold(self._address(job_id)), job_id=job_id)

    def release(self, job_id: str) -> None:
        self._run(commands.release(self._address(job_id)), job_id=job_id)

    def requeue(self, job_id: str) -> None:
        self._run(commands.requeue(self._address(job_id)), job_id=job_id)

    def cancel(self, job_id: str) -> None:
        self._run(commands.cancel(self._address(job_id)), job_id=job_id)
