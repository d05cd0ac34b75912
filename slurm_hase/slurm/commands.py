"""Pure builders of Slurm command lines (argv lists, one value per element, never a shell).

Notes on versions:
- 22.05's ``squeue --json`` ignores every filter (-j, -t, -u), so no filters are offered here;
  callers filter the parsed jobs instead.
- ``scontrol ... --json`` exists only from 23.02, so jobs/nodes/partitions are read with
  ``squeue --json`` and ``scontrol show ... -o`` text, which every version has.
- ``sacct -P`` separates fields with ``|``, which also appears inside Constraints
  (``a100|v100``); we ask for an ASCII unit separator instead.
"""

from __future__ import annotations

from collections.abc import Sequence

from slurm_hase.slurm.types import JobUpdate

SACCT_DELIMITER = "\x1f"
SACCT_FIELDS: tuple[str, ...] = (
    "JobID", "JobName", "Account", "User", "State", "ExitCode", "Submit", "Eligible", "Start",
    "End", "ElapsedRaw", "ReqTRES", "AllocTRES", "Constraints", "NodeList", "Partition",
    "Comment",
)


def version() -> list[str]:
    """``sinfo --version`` (prints e.g. ``slurm-wlm 22.05.8``)."""
    return ["sinfo", "--version"]


def squeue_json() -> list[str]:
    """All jobs slurmctld knows, as JSON (22.05 also lists recently finished ones)."""
    return ["squeue", "--json"]


def sinfo_json() -> list[str]:
    """Nodes (22.05) or node/partition records (>= 23.02) as JSON."""
    return ["sinfo", "--json"]


def _window(since: str, until: str, job_ids: Sequence[str]) -> list[str]:
    if job_ids:  # with -j and no -S, sacct looks back to the epoch
        return ["-j", ",".join(str(j) for j in job_ids)]
    return ["-S", since, "-E", until]


def sacct_json(
    *, since: str = "now-1day", until: str = "now", job_ids: Sequence[str] = ()
) -> list[str]:
    """``sacct --json -a`` over a window, or for given jobs (then the window is ignored)."""
    return ["sacct", "--json", "-a", *_window(since, until, job_ids)]


def sacct_parsable(
    *,
    since: str = "now-1day",
    until: str = "now",
    job_ids: Sequence[str] = (),
    fields: Sequence[str] = SACCT_FIELDS,
    delimiter: str = SACCT_DELIMITER,
    cluster: str | None = None,
) -> list[str]:
    """``sacct -a -X -P ... -D``: allocations only, with a header line and an unambiguous
    delimiter, and every run of a requeued job (``-D``; without it sacct shows only the last run,
    and a report or usage ledger would miss the GPU time of the runs before). A requeued job is
    then several records with the same job id, one per run, each with its own submit (the
    requeue resets it), start, end and allocation; the earlier runs have state REQUEUED.

    One cluster's jobs: `cluster` (``-M``, one name), else this one (``--local``: without it
    sacct shows every cluster of the federation on a federated cluster)."""
    return [
        "sacct", "-a", "-X", "-P", f"--delimiter={delimiter}",
        *_window(since, until, job_ids), "-o", ",".join(fields), "-D",
        *(["-M", cluster] if cluster else ["--local"]),
    ]


def show_jobs(job_id: str | None = None) -> list[str]:
    """``scontrol show job -o [ID]``: one line per job."""
    return ["scontrol", "show", "job", "-o", *([str(job_id)] if job_id else [])]


def show_nodes() -> list[str]:
    """``scontrol show node -d -o``: one line per node; -d adds GresUsed, the GPUs that MPS
    shares and shards hold (AllocTRES counts whole GPUs only)."""
    return ["scontrol", "show", "node", "-d", "-o"]


def show_partitions() -> list[str]:
    """``scontrol show partition -o``: one line per partition."""
    return ["scontrol", "show", "partition", "-o"]


def show_config() -> list[str]:
    """``scontrol show config``: ``Key = value`` lines (the same on every version)."""
    return ["scontrol", "show", "config"]


def update_job(job_id: str, update: JobUpdate) -> list[str]:
    """``scontrol update jobid=N Key=value...`` for the fields set in `update`."""
    argv = ["scontrol", "update", f"jobid={job_id}"]
    if update.nice is not None:
        argv.append(f"Nice={update.nice}")
    if update.features is not None:
        argv.append(f"Features={update.features}")
    if update.tres_per_job is not None:
        argv.append(f"TresPerJob={update.tres_per_job}")
    if update.tres_per_node is not None:
        argv.append(f"TresPerNode={update.tres_per_node}")
    if update.comment is not None:
        argv.append(f"Comment={update.comment}")
    return argv


def hold(job_id: str) -> list[str]:
    return ["scontrol", "hold", str(job_id)]


def release(job_id: str) -> list[str]:
    return ["scontrol", "release", str(job_id)]


def requeue(job_id: str) -> list[str]:
    return ["scontrol", "requeue", str(job_id)]


def cancel(job_id: str) -> list[str]:
    return ["scancel", str(job_id)]


def sbatch(args: Sequence[str]) -> list[str]:
    """``sbatch --parsable ARGS``; the script, if any, goes to stdin."""
    return ["sbatch", "--parsable", *args]


def sacctmgr_accounts(cluster: str | None = None) -> list[str]:
    """The accounts with an association on `cluster`, one name per line (a name may repeat:
    one line per association), or with none given every account in Slurm's database; ``root``
    and accounts whose fairshare is ``parent`` included, which the shares leave out."""
    if cluster:
        return ["sacctmgr", "show", "assoc", f"cluster={cluster}", "format=account", "-P", "-n"]
    return ["sacctmgr", "show", "account", "format=account", "-P", "-n"]


def sacctmgr_shares(cluster: str | None = None) -> list[str]:
    """Associations with their fairshare weights and the account tree,
    ``account|parent|user|share`` per line (an account's row has its parent, a user's row
    its user); of `cluster` only when given (``cluster=NAME``)."""
    return ["sacctmgr", "show", "assoc", *([f"cluster={cluster}"] if cluster else []),
            "format=account,parentname,user,share", "-P", "-n"]


def sacctmgr_shares_by_cluster() -> list[str]:
    """Every cluster's associations, ``cluster|account|parent|user|share`` per line: for when
    this cluster's name cannot be asked (slurmctld down), to tell whether there is one."""
    return ["sacctmgr", "show", "assoc", "format=cluster,account,parentname,user,share", "-P",
            "-n"]
