"""sbatch's option table and a scanner that splits an sbatch command line the way sbatch does.

sbatch parses with ``getopt_long`` in "+" mode: options stop at the first non-option argument
(the script); long options may be abbreviated to any unique prefix; a required argument is
either ``--opt=val`` or the next word; an optional argument only ``--opt=val`` (``-kVAL``).
The table was probed against the real sbatch 22.05.8 (each name with and without ``=x``); a few
names from 23.x/24.x are added so their values are not mistaken for the script.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

REQUIRED = "required"
OPTIONAL = "optional"
NONE = "none"



def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


LONG_REQUIRED: frozenset[str] = _names("""
account acctg-freq array batch bb bbf begin chdir cluster cluster-constraint clusters comment
constraint container core-spec cores-per-socket cpu-freq cpus-per-gpu cpus-per-task deadline
delay-boot dependency distribution error exclude export export-file extra-node-info gid
gpu-bind gpu-freq gpus gpus-per-node gpus-per-socket gpus-per-task gres gres-flags hint input
job-name kill-on-invalid-dep licenses license mail-type mail-user mcs-label mem mem-bind
mem-per-cpu mem-per-gpu mincpus network nodefile nodelist nodes ntasks ntasks-per-core
ntasks-per-gpu ntasks-per-node tasks-per-node ntasks-per-socket open-mode output partition
power prefer priority profile qos reservation signal sockets-per-node switches thread-spec
threads-per-core time time-min tmp uid wait-all-nodes wckey wrap
extra tres-per-task tres-bind segment
""")
LONG_OPTIONAL: frozenset[str] = _names("exclusive get-user-env nice no-kill propagate oom-kill-step")
LONG_NONE: frozenset[str] = _names("""
contiguous help hold ignore-pbs no-requeue overcommit oversubscribe parsable quiet reboot
requeue spread-job test-only usage use-min-nodes verbose version wait
""")
LONG_OPTIONS: dict[str, str] = {
    **{n: REQUIRED for n in LONG_REQUIRED},
    **{n: OPTIONAL for n in LONG_OPTIONAL},
    **{n: NONE for n in LONG_NONE},
}
# Names only some releases know (the live test checks every name against the real sbatch of
# both releases): the ones sbatch 22.05.8 does not know ("unrecognized option") and 24.11.5 does,
# and the ones 22.05.8 knows and 24.11.5 does not (Slurm dropped its power plugins; taken as
# gone from 23.11 on). A prefix of one may mean another option, or nothing, on another release
# (--ext is --extra-node-info on 22.05, ambiguous with --extra on 24.11).
SINCE_23: frozenset[str] = _names("extra tres-per-task tres-bind segment oom-kill-step")
UNTIL_23_11: frozenset[str] = _names("power")
VERSIONED: frozenset[str] = SINCE_23 | UNTIL_23_11
OPTIONS_22: dict[str, str] = {n: k for n, k in LONG_OPTIONS.items() if n not in SINCE_23}
OPTIONS_23_11: dict[str, str] = {n: k for n, k in LONG_OPTIONS.items() if n not in UNTIL_23_11}
# Slurm's (major, minor) version, asked only when it decides what a name means; None: unknown
# (the newest table is used)
VersionFn = Callable[[], "tuple[int, int] | None"]

SHORT_TO_LONG: dict[str, str] = {
    "a": "array", "A": "account", "b": "begin", "B": "extra-node-info", "c": "cpus-per-task",
    "C": "constraint", "d": "dependency", "D": "chdir", "e": "error", "F": "nodefile",
    "G": "gpus", "h": "help", "H": "hold", "i": "input", "J": "job-name", "k": "no-kill",
    "L": "licenses", "m": "distribution", "M": "clusters", "n": "ntasks", "N": "nodes",
    "o": "output", "O": "overcommit", "p": "partition", "q": "qos", "Q": "quiet",
    "s": "oversubscribe", "S": "core-spec", "t": "time", "v": "verbose", "V": "version",
    "w": "nodelist", "W": "wait", "x": "exclude",
}
SHORT_REQUIRED: frozenset[str] = frozenset("abcdeimnopqtwxABCDFGJLMNS")
SHORT_OPTIONAL: frozenset[str] = frozenset("k")

HASE_PREFIX = "hase-"
# the options slurm-hase's SPANK plugin adds to sbatch (spank/hase_mps.c), each with a value
SPANK_OPTIONS = frozenset({"hase-mps", "hase-share-tag"})
HET_SEPARATOR = ":"


class Opt(NamedTuple):
    """One option occurrence: canonical long name (or the name as typed if unknown)."""

    name: str
    value: str | None
    start: int  # index of its first word in argv
    end: int  # index after its last word
    known: bool = True


class Scan:
    """An sbatch command line split into options, the script and the script's arguments."""

    __slots__ = ("opts", "script_index", "het")

    def __init__(self) -> None:
        self.opts: list[Opt] = []
        self.script_index: int | None = None  # argv index of the script; None: stdin/--wrap
        self.het = False  # ':' separators: a heterogeneous job

    def has(self, *names: str) -> bool:
        return any(o.name in names for o in self.opts)

    def last(self, *names: str) -> str | None:
        """Value of the last occurrence of any of ``names`` ("" for a flag); None if absent."""
        found: str | None = None
        for o in self.opts:
            if o.name in names:
                found = "" if o.value is None else o.value
        return found


# names sbatch 22.05 takes for the same option (getopt finds a prefix of both unambiguous)
ALIASES: dict[str, str] = {"cluster": "clusters", "license": "licenses"}


def resolve_long(name: str, options: Mapping[str, str] = LONG_OPTIONS) -> str | None:
    """The option a (possibly abbreviated) long name means among `options`, aliases made one
    (``--cluster`` is ``clusters``); None if unknown or ambiguous."""
    if name in options:
        return ALIASES.get(name, name)
    hits = {ALIASES.get(n, n) for n in options if n.startswith(name)}
    return hits.pop() if len(hits) == 1 else None


def resolve_for(name: str, version: VersionFn | None) -> str | None:
    """resolve_long by the table of the Slurm `version` gives, asked only for a name whose
    meaning the version decides (a prefix of a name only some releases know); the whole table
    where the version is unknown."""
    if version is not None and any(n.startswith(name) for n in VERSIONED):
        found = version()
        if found is not None and found < (23, 0):
            return resolve_long(name, OPTIONS_22)
        if found is not None and found >= (23, 11):
            return resolve_long(name, OPTIONS_23_11)
    return resolve_long(name)


def scan(argv: Sequence[str], *, is_ours: frozenset[str] = frozenset(),
         version: VersionFn | None = None) -> Scan:
    """Split ``argv`` (without the program name) as sbatch's getopt would.

    Long options whose name starts with ``hase-`` are hsbatch's, but for the SPANK plugin's
    (SPANK_OPTIONS); those named in ``is_ours`` and the plugin's take a value (``--hase-key=v``
    or ``--hase-key v``), the others are flags. `version` (resolve_for) is asked only about a
    name that means something else on an older sbatch.
    """
    out = Scan()
    i, n = 0, len(argv)
    while i < n:
        word = argv[i]
        if word == "--":
            out.script_index = i + 1 if i + 1 < n else None
            return out
        if word == HET_SEPARATOR:
            out.het = True
            i += 1
            continue
        if word.startswith("--"):
            i = _long(argv, i, out, is_ours, version)
            continue
        if word.startswith("-") and len(word) > 1:
            i = _short(argv, i, out)
            continue
        out.script_index = i
        return out
    return out


def _long(argv: Sequence[str], i: int, out: Scan, is_ours: frozenset[str],
          version: VersionFn | None) -> int:
    body = argv[i][2:]
    name, eq, value = body.partition("=")
    if name.startswith(HASE_PREFIX):
        if eq or (name not in is_ours and name not in SPANK_OPTIONS):
            out.opts.append(Opt(name, value if eq else None, i, i + 1))
            return i + 1
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        out.opts.append(Opt(name, nxt, i, min(i + 2, len(argv))))
        return i + 2
    full = resolve_for(name, version)
    if full is None:
        out.opts.append(Opt(name, value if eq else None, i, i + 1, known=False))
        return i + 1
    kind = LONG_OPTIONS[full]
    if eq or kind != REQUIRED:
        out.opts.append(Opt(full, value if eq else None, i, i + 1))
        return i + 1
    nxt = argv[i + 1] if i + 1 < len(argv) else None
    out.opts.append(Opt(full, nxt, i, min(i + 2, len(argv))))
    return i + 2


def _short(argv: Sequence[str], i: int, out: Scan) -> int:
    word = argv[i]
    j = 1
    while j < len(word):
        ch = word[j]
        rest = word[j + 1:]
        long_name = SHORT_TO_LONG.get(ch, ch)
        if ch in SHORT_REQUIRED:
            if rest:
                out.opts.append(Opt(long_name, rest, i, i + 1))
                return i + 1
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            out.opts.append(Opt(long_name, nxt, i, min(i + 2, len(argv))))
            return i + 2
        if ch in SHORT_OPTIONAL:
            out.opts.append(Opt(long_name, rest or None, i, i + 1))
            return i + 1
        out.opts.append(Opt(long_name, None, i, i + 1, known=ch in SHORT_TO_LONG))
        j += 1
    return i + 1
