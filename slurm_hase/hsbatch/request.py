"""What a submission asks for, merged the way sbatch merges it:
``#SBATCH`` directives < ``SBATCH_*`` environment < command line.

Only read here (never rewritten): the GPU request, constraint, partition, time limit, comment.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from slurm_hase.hsbatch.sbatch_opts import Scan, scan
from slurm_hase.hsbatch.script import C_SPACE, HET_WORDS

GPU_OPTIONS = ("gpus", "gpus-per-node", "gpus-per-task", "gpus-per-socket", "gres")
ENV_NAMES: dict[str, str] = {
    "gpus": "SBATCH_GPUS",
    "gpus-per-node": "SBATCH_GPUS_PER_NODE",
    "gpus-per-task": "SBATCH_GPUS_PER_TASK",
    "gpus-per-socket": "SBATCH_GPUS_PER_SOCKET",
    "gres": "SBATCH_GRES",
    "constraint": "SBATCH_CONSTRAINT",
    "partition": "SBATCH_PARTITION",
    "time": "SBATCH_TIMELIMIT",
    "clusters": "SBATCH_CLUSTERS",
}  # sbatch 22.05 reads no SBATCH_NODES (nor any variable for --nodelist, --exclude, --hold)
# read by sbatch as well, where the SBATCH_ one is unset (sbatch(1), INPUT ENVIRONMENT VARIABLES)
ALSO_ENV: dict[str, str] = {"clusters": "SLURM_CLUSTERS"}


class Request(NamedTuple):
    """The parts of a job request hsbatch looks at."""

    gpu_untyped: bool = False  # asks for GPUs (or MPS) without a type
    gpu_typed: bool = False  # names a GPU type somewhere
    # constraint, preferred features, node list, node file or excluded nodes given
    constrained: bool = False
    multi_cluster: bool = False
    comment: str | None = None
    partitions: tuple[str, ...] = ()  # () = the default partition
    time_limit_s: int | None = None
    requeue: bool | None = None  # --requeue / --no-requeue as sbatch will see it (None = unset)
    gpus: int | None = None  # GPUs the job asks for in all, where that is plain (gpu_count)
    held: bool = False  # submitted held (--hold / -H): sbatch then checks no node configuration
    # sbatch ignores the script's #PBS lines: --ignore-pbs on the command line or in an #SBATCH
    # line, or SBATCH_IGNORE_PBS set as sbatch sets a flag from a variable (env_flag_set)
    ignore_pbs: bool = False

    @property
    def wants_gpus(self) -> bool:
        return self.gpu_untyped or self.gpu_typed


def effective(name: str, cli: Scan, env: Mapping[str, str], script: Scan) -> str | None:
    """The value sbatch will use for option ``name`` ("" for a flag), or None if unset."""
    value = cli.last(name)
    if value is not None:
        return value
    for env_name in (ENV_NAMES.get(name), ALSO_ENV.get(name)):
        if env_name is not None and env_name in env:
            return env[env_name]
    return script.last(name)


def directive_scan(directives: Sequence[Sequence[str]]) -> Scan:
    """All options of the ``#SBATCH`` lines. sbatch parses the words of all the lines of one
    het component as one argument list (``--comment`` at the end of a line takes the next
    line's first word); a line that starts with ``hetjob`` starts the next component."""
    out = Scan()
    for words in het_components(directives):
        out.opts.extend(scan(words).opts)
    return out


def het_components(directives: Sequence[Sequence[str]]) -> list[list[str]]:
    """The directive words of each het component, joined across lines."""
    components: list[list[str]] = [[]]
    for words in directives:
        if words and words[0] in HET_WORDS:
            components.append(list(words[1:]))
        else:
            components[-1].extend(words)
    return components


def build_request(
    cli: Scan, env: Mapping[str, str], directives: Sequence[Sequence[str]]
) -> Request:
    """Merge command line, environment and ``#SBATCH`` lines into a Request."""
    script = directive_scan(directives)
    untyped = typed = False
    for name in GPU_OPTIONS:
        value = effective(name, cli, env, script)
        if not value:
            continue
        u, t = (classify_gres if name == "gres" else classify_gpus)(value)
        untyped, typed = untyped or u, typed or t
    # a constraint given empty (--constraint=) is the user's too: no constraint, which a
    # constraint of hsbatch's put before it would not survive (sbatch takes the last one).
    # --prefer too: Slurm runs the job on preferred nodes, where it can, in place of any
    # constraint (sbatch 22.05 and 24.11 read no SBATCH_PREFER)
    constrained = effective("constraint", cli, env, script) is not None or any(
        effective(n, cli, env, script) not in (None, "")
        for n in ("nodelist", "nodefile", "exclude", "prefer")
    )
    partition = effective("partition", cli, env, script) or ""
    return Request(
        gpu_untyped=untyped,
        gpu_typed=typed,
        constrained=constrained,
        multi_cluster=bool(effective("clusters", cli, env, script)),
        comment=effective("comment", cli, env, script),
        partitions=tuple(p for p in partition.split(",") if p),
        time_limit_s=parse_time_limit(effective("time", cli, env, script)),
        requeue=requeue_choice(cli, env, script),
        gpus=gpu_count(cli, env, script),
        held=effective("hold", cli, env, script) is not None,
        ignore_pbs=(cli.has("ignore-pbs") or script.has("ignore-pbs")
                    or env_flag_set(env.get("SBATCH_IGNORE_PBS"))),
    )


def env_flag_set(value: str | None) -> bool:
    """Whether sbatch (22.05, slurm_opt.c) sets a flag option from its variable's `value`: when
    it is empty, ``yes`` in any case, or a whole number (strtol: blanks and a sign first, all
    of it read) that is not zero. Any other value (``0``, ``no``, ``true``, ``1.0``) resets it."""
    if value is None:
        return False
    if value == "" or value.lower() == "yes":
        return True
    number = re.fullmatch(f"[{re.escape(C_SPACE)}]*[+-]?([0-9]+)", value)  # strtol skips C_SPACE
    return number is not None and int(number.group(1)) != 0


def gpu_count(cli: Scan, env: Mapping[str, str], script: Scan) -> int | None:
    """The job's GPUs in all when the request says it plainly: one node (no --nodes, or 1) and
    exactly one of --gpus, --gpus-per-node, --gres=gpu[:type]:N. None otherwise (per-task or
    per-socket GPUs, several nodes, MPS shares, counts that are not numbers)."""
    nodes = effective("nodes", cli, env, script)
    if nodes not in (None, "", "1", "1-1"):
        return None
    given = {n: v for n in GPU_OPTIONS if (v := effective(n, cli, env, script))}
    if len(given) != 1:
        return None
    name, value = next(iter(given.items()))
    if name not in ("gpus", "gpus-per-node", "gres"):
        return None
    if name == "gres":
        items = gres_items(value)
        if any(kind == "mps" for kind, _t, _n in items):
            return None
        counts = [n for _kind, _t, n in items]
    else:
        counts = [_count(re.sub(r"\(.*?\)", "", item.strip()).split(":")[-1])
                  for item in value.split(",")]
    if any(n <= 0 for n in counts):
        return None
    return sum(counts) or None


def requeue_choice(cli: Scan, env: Mapping[str, str], script: Scan) -> bool | None:
    """True for --requeue, False for --no-requeue, None when neither is given anywhere
    (command line > SBATCH_REQUEUE/SBATCH_NO_REQUEUE > #SBATCH, the last one in a source wins)."""
    for source in (cli, None, script):
        if source is None:
            # sbatch 22.05 reads SBATCH_NO_REQUEUE, then SBATCH_REQUEUE, each as a flag
            # (env_flag_set): a value that does not set it resets the choice (`sbatch -v`:
            # SBATCH_REQUEUE=0 beside SBATCH_NO_REQUEUE= leaves it unset)
            choice: bool | None = None
            for var, value in (("SBATCH_NO_REQUEUE", False), ("SBATCH_REQUEUE", True)):
                if var in env:
                    choice = value if env_flag_set(env[var]) else None
            if choice is not None:
                return choice
            continue
        last = [o.name for o in source.opts if o.name in ("requeue", "no-requeue")]
        if last:
            return last[-1] == "requeue"
    return None


def classify_gpus(value: str) -> tuple[bool, bool]:
    """(untyped, typed) for a ``--gpus*`` value such as ``2``, ``a100:2`` or ``a100:1,v100:1``."""
    untyped = typed = False
    for item in value.split(","):
        parts = item.strip().split(":")
        if not parts[0]:
            continue
        if len(parts) == 1:
            untyped = untyped or _count(parts[0]) > 0
        else:
            typed = typed or _count(parts[-1]) > 0
    return untyped, typed


def gres_items(value: str) -> list[tuple[str, str | None, int]]:
    """The GPU and MPS items of a ``--gres`` value as (``gpu``|``mps``, type or None, count):
    ``gpu`` is one GPU, ``gpu:a100`` one of that type, a count that is not a number is -1;
    other GRES are left out."""
    out: list[tuple[str, str | None, int]] = []
    for item in value.split(","):
        parts = re.sub(r"\(.*?\)", "", item.strip()).split(":")
        if parts and parts[0] == "gres":
            parts = parts[1:]
        if not parts or parts[0] not in ("gpu", "mps"):
            continue
        kind, rest = parts[0], parts[1:]
        if not rest:
            out.append((kind, None, 1))
        elif len(rest) == 1:
            n = _count(rest[0])
            out.append((kind, None, n) if n >= 0 else (kind, rest[0], 1))  # gpu:a100: one typed
        else:
            out.append((kind, rest[0], _count(rest[1])))
    return out


def classify_gres(value: str) -> tuple[bool, bool]:
    """(untyped, typed) for ``--gres`` such as ``gpu:2``, ``gpu:a100:1``, ``mps:50``."""
    items = gres_items(value)
    return (any(t is None and n > 0 for _k, t, n in items),
            any(t is not None and n != 0 for _k, t, n in items))


def _count(text: str) -> int:
    """A GRES count (``2``, ``1k``); -1 if not a number (then it is a type name)."""
    m = re.fullmatch(r"(\d+)([kKmMgG]?)", text.strip())
    if not m:
        return -1
    return int(m.group(1)) * {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[m.group(2).lower()]


def parse_time_limit(text: str | None) -> int | None:
    """Seconds for Slurm's time formats (``M``, ``M:S``, ``H:M:S``, ``D-H[:M[:S]]``);
    None if unset, unlimited (a limit of zero is no limit, as sbatch says) or unreadable."""
    seconds = _time_limit_s(text)
    return seconds if seconds != 0 else None


def _time_limit_s(text: str | None) -> int | None:
    if not text:
        return None
    t = text.strip()
    if t.upper() in ("UNLIMITED", "INFINITE", "-1"):
        return None
    days = 0
    if "-" in t:
        d, _, t = t.partition("-")
        if not d.isdigit():
            return None
        days = int(d)
        parts = t.split(":") if t else ["0"]
        if not all(p.isdigit() for p in parts) or len(parts) > 3:
            return None
        h, m, s = ([int(p) for p in parts] + [0, 0])[:3]
        return days * 86400 + h * 3600 + m * 60 + s
    parts = t.split(":")
    if not all(p.isdigit() for p in parts) or not 1 <= len(parts) <= 3:
        return None
    nums = [int(p) for p in parts]
    if len(nums) == 1:
        return nums[0] * 60
    if len(nums) == 2:
        return nums[0] * 60 + nums[1]
    return nums[0] * 3600 + nums[1] * 60 + nums[2]
