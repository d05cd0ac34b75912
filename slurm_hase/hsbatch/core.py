"""hsbatch's flow: split argv, read the description, plan additions, call sbatch exactly once.

Errors in the user's description stop before anything is submitted (exit 2). Everything else
that hsbatch adds is optional: if Slurm, the predictor or its model fails, the job is submitted
exactly as sbatch would submit it, with one warning line on stderr.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from slurm_hase.errors import DescriptorError, SlurmCommandError, SlurmError
from slurm_hase.hsbatch.argv import HaseOptions, split_argv
from slurm_hase.hsbatch.sbatch_opts import LONG_OPTIONS, REQUIRED, Scan
from slurm_hase.hsbatch.script import (
    Header,
    found_script,
    keep_copy,
    parse_header,
    read_once,
    read_script,
    readable_again,
    remove_copies,
)

if TYPE_CHECKING:  # the rest loads only when a job carries a description (startup time)
    from slurm_hase.hsbatch.plan import PredictFn
    from slurm_hase.predict.descriptor import WorkloadDescriptor
    from slurm_hase.slurm.runner import Runner
    from slurm_hase.slurm.types import Node, Partition

REFUSED = "Batch job submission failed"  # sbatch's words when it submitted nothing
# slurmctld's reasons (slurm_errno.c) that a GPU-type constraint can cause by leaving too few
# nodes of the job's shape; a job refused for any other reason is refused without it too
NO_NODES_FIT = ("Requested node configuration is not available",
                "Requested partition configuration not available now",
                "Invalid feature specification",
                "Node count specification invalid",
                "Memory required by task is not available",
                "More processors requested than permitted")
# sbatch runs with no time limit: `--wait` blocks until the job ends, weeks later maybe, and a
# cut-off would kill sbatch and lose the "Submitted batch job N" line it already printed
NO_TIMEOUT = None
VERSION_TIMEOUT_S = 30.0  # `sbatch --version`, asked only to read an option name
WARN = "hsbatch: warning: "


class TextSink(Protocol):
    """Where hsbatch writes text: a stream, or anything with its write."""

    def write(self, text: str, /) -> int: ...


@runtime_checkable
class ByteSink(Protocol):
    """A sink that also takes raw bytes (the CLI's streams): sbatch's output goes there as
    it came, whatever the locale's encoding."""

    def write_bytes(self, data: bytes, /) -> int: ...


class Io:
    """Where hsbatch reads stdin and writes output (real streams in the CLI, fakes in tests)."""

    __slots__ = ("read_stdin", "out", "err", "env")

    def __init__(self, read_stdin: Callable[[], str], out: TextSink, err: TextSink,
                 env: Mapping[str, str]) -> None:
        self.read_stdin = read_stdin
        self.out = out
        self.err = err
        self.env = env


class Deps:
    """Replaceable collaborators: the runner, how to read the cluster, how to predict, and
    whether to use the per-user cluster cache (see :mod:`slurm_hase.hsbatch.cluster`)."""

    __slots__ = ("runner", "sbatch", "cluster", "predictor", "cache", "shield")

    def __init__(
        self, runner: Runner, sbatch: str = "sbatch",
        cluster: Callable[[Runner], tuple[Sequence[Node], Sequence[Partition]]] | None = None,
        predictor: Callable[[str | None], PredictFn] | None = None, cache: bool = False,
        shield: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext,
    ) -> None:
        self.runner = runner
        self.sbatch = sbatch
        self.cluster = cluster
        self.predictor = predictor
        self.cache = cache
        # held while sbatch runs: the CLI's keeps a Ctrl-C from killing hsbatch before sbatch,
        # which gets it too, ends and has its output ("Submitted batch job N") relayed
        self.shield = shield


def run(argv: Sequence[str], io: Io, deps: Deps) -> int:
    """One hsbatch invocation; returns the exit code (sbatch's, or 2 for a bad description)."""
    copies: list[str] = []  # files read once (a pipe), kept for sbatch until it returns
    try:
        return _run(argv, io, deps, copies)
    finally:
        remove_copies(copies)


def _sbatch_version(deps: Deps) -> Callable[[], tuple[int, int] | None]:
    """Slurm's (major, minor) from ``sbatch --version``, asked at most once; None when it
    cannot tell (the newest option table is used then)."""

    @functools.cache
    def version() -> tuple[int, int] | None:
        from slurm_hase.slurm.parse_text import parse_version

        try:
            res = deps.runner.run([deps.sbatch, "--version"], timeout_s=VERSION_TIMEOUT_S)
            return parse_version(res.stdout).tuple if res.returncode == 0 else None
        except SlurmError:
            return None

    return version


def _run(argv: Sequence[str], io: Io, deps: Deps, copies: list[str]) -> int:
    try:
        sb_argv, hopts, sc = split_argv(argv, _sbatch_version(deps))
    except DescriptorError as exc:
        io.err.write(f"hsbatch: error: {exc}\n")
        return exc.exit_code
    if sc.has("help", "usage", "version"):
        code = _sbatch(deps, sb_argv, None, io)
        if sc.has("help"):
            # our options even where sbatch cannot print its own (no Slurm configuration here)
            from slurm_hase.hsbatch.text import HELP

            if code != 0:
                io.err.write(f"hsbatch: sbatch --help failed (exit {code}); slurm-hase's own "
                             "options follow\n")
            io.out.write(HELP)
        return code
    sb_argv = readable_again(sb_argv, sc.opts, copies)
    if sc.script_index is None and not sc.has("wrap") and _value_missing(sc):
        # sbatch refuses it at once ("option requires an argument"), before reading stdin:
        # hsbatch must not wait for a script on stdin first (a terminal would seem to hang)
        return _sbatch(deps, sb_argv, None, io)
    if unknown := _unknown_options(sc):
        # hsbatch cannot tell whether such an option takes the next word as its value
        # (`--container-image IMG job.sh`), so which word is the script: sbatch decides. It
        # refuses a bad option at once, or reads the script (from stdin itself, with none
        # named), and the job goes as it is (a pipe still as a copy: sbatch could not read it).
        # The warning follows an accepted job only: a refusal reads exactly as sbatch's
        index = sc.script_index
        if index is not None and found_script(sb_argv[index], sc.last("chdir"),
                                              io.env.get("PATH")) is None:
            sb_argv, _ = _pipe_copied(sb_argv, index, copies)
        code = _sbatch(deps, sb_argv, None, io)
        if code == 0:
            io.err.write(f"{WARN}hsbatch does not know {', '.join(unknown)}; the job went to "
                         "sbatch as it is, without a workload description\n")
        return code
    stdin_text: str | None = None
    label, text = "script", None
    if sc.script_index is not None:
        label = sb_argv[sc.script_index]
        # the file sbatch reads: a relative name is looked for in the -D directory and PATH
        found = found_script(label, sc.last("chdir"), io.env.get("PATH"))
        if found is not None:
            text = read_script(found)
        else:
            sb_argv, text = _pipe_copied(sb_argv, sc.script_index, copies)
            text = read_script(label) if text is None else text
    elif not sc.has("wrap"):
        # bytes that are not UTF-8 stay as surrogates and reach sbatch as they came (runner.py)
        stdin_text = text = io.read_stdin()
        label = "stdin"
    try:
        header = parse_header(text, label) if text is not None else Header()
        req = None
        if _described(hopts, header):
            from slurm_hase.hsbatch.request import build_request  # described jobs only

            req = build_request(sc, io.env, header.directives)
        desc = _describe(hopts, header, label, req.gpus if req is not None else None, io)
        comment = desc.to_comment() if desc is not None else None
    except DescriptorError as exc:
        io.err.write(f"hsbatch: error: {exc}; nothing submitted\n")
        return exc.exit_code
    for lineno in header.late_hase:
        io.err.write(f"{WARN}{label} line {lineno}: #HASE after the first command is ignored\n")
    extra: list[str] = []
    if desc is not None and req is not None:
        from slurm_hase.hsbatch.additions import additions  # described jobs only

        extra = additions(sc, hopts, header, req, desc, comment, io, deps)
    if desc is None and hopts.explain:
        io.err.write("hsbatch: no workload description; the scheduler will describe this job "
                     "by its history (same user and job name)\n")
    # hsbatch's additions without its GPU-type constraint (and the comment without the record
    # of it, so the daemon never takes a constraint the user sets later for hsbatch's): what
    # to try again if sbatch refuses the job for want of nodes that meet the constraint
    unconstrained = [f"--comment={comment}" if a.startswith("--comment=") else a
                     for a in extra if not a.startswith("--constraint=")]
    return _sbatch(deps, [*extra, *sb_argv], stdin_text, io,
                   retry=[*unconstrained, *sb_argv] if len(unconstrained) < len(extra) else None)


def _pipe_copied(sb_argv: list[str], index: int,
                 copies: list[str]) -> tuple[list[str], str | None]:
    """`sb_argv` with its script (at `index`, not found_script's) replaced by a private copy of
    the same base name where it can be read only once (a pipe or FIFO, which sbatch could not
    read again), and the script's text; (`sb_argv`, None) for any other script."""
    label = sb_argv[index]
    once = read_once(label)
    if once is None:
        return sb_argv, None
    copy = keep_copy(once, os.path.basename(label))
    copies.extend([copy, os.path.dirname(copy)])
    return [*sb_argv[:index], copy, *sb_argv[index + 1:]], once.decode("utf-8", "replace")


def _unknown_options(sc: Scan) -> list[str]:
    """The options of `sc` sbatch's table does not hold (as typed, with their dashes)."""
    return [("--" if len(o.name) > 1 else "-") + o.name for o in sc.opts if not o.known]


def _value_missing(sc: Scan) -> bool:
    """Whether the last word is an option that needs a value (sbatch's usage error)."""
    return any(o.value is None and LONG_OPTIONS.get(o.name) == REQUIRED for o in sc.opts)


def _described(hopts: HaseOptions, header: Header) -> bool:
    """Whether the job comes with a description (a file, #HASE lines or --hase-KEY options)."""
    return hopts.descriptor_file is not None or bool(header.hase) or bool(hopts.pairs)


FROM_REQUEST = "the job's GPU request"  # where a gpus= taken from the request was "given"


def _describe(hopts: HaseOptions, header: Header, label: str, job_gpus: int | None,
              io: Io) -> WorkloadDescriptor | None:
    """The description from its sources; its GPU count defaults to the job's GPU request."""
    if not _described(hopts, header):
        return None
    from slurm_hase.hsbatch import describe

    sources = describe.Sources()
    if job_gpus is not None and job_gpus > 1:  # lowest precedence: any gpus= given wins
        sources.add_source([describe.Entry("gpus", job_gpus, FROM_REQUEST)])
    if hopts.mps_option is not None:  # the SPANK plugin's share, unless the description says
        sources.add_source([describe.Entry("mps", hopts.mps_option, "--hase-mps")])
    if hopts.descriptor_file is not None:
        sources.add_source(describe.file_entries(hopts.descriptor_file))
    sources.add_source(describe.script_entries(header.hase, label))
    sources.add_source(describe.option_entries(hopts.pairs))
    if not sources:
        return None
    desc = sources.build()
    said = sources.where("gpus")
    if job_gpus is not None and said != FROM_REQUEST and desc.num_gpus != job_gpus:
        io.err.write(f"{WARN}{said or 'the description'} says gpus={desc.num_gpus} but the job "
                     f"asks for {job_gpus} GPU(s); predictions are for {desc.num_gpus}\n")
    from slurm_hase.predict.models import fill

    try:
        fill(desc)
    except DescriptorError as exc:
        where = sources.where("model") or sources.where("gflops") or "workload description"
        raise DescriptorError(f"{where}: {exc}") from None
    return desc


def _sbatch(deps: Deps, args: Sequence[str], stdin: str | None, io: Io,
            retry: Sequence[str] | None = None) -> int:
    """Run sbatch and relay its output and exit status untouched. `retry`: the arguments
    without the GPU-type constraint hsbatch added; when sbatch refuses the job with it
    (REFUSED: nothing was submitted) for want of nodes that fit (NO_NODES_FIT), sbatch runs
    once more with those, so that what hsbatch adds never loses a job sbatch would take (a
    constraint that leaves too few nodes of the job's shape, say)."""
    try:
        with deps.shield():
            result = deps.runner.run([deps.sbatch, *args], stdin=stdin, timeout_s=NO_TIMEOUT)
        if retry is not None and result.returncode != 0 and _no_nodes_fit(result.stderr):
            why = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else ""
            io.err.write(f"{WARN}sbatch refused the job with the GPU-type constraint hsbatch "
                         f"added ({why}); submitting it without that constraint\n")
            with deps.shield():
                result = deps.runner.run([deps.sbatch, *retry], stdin=stdin,
                                         timeout_s=NO_TIMEOUT)
    except SlurmCommandError as exc:
        io.err.write(f"hsbatch: {exc.stderr}\n")
        return exc.returncode
    except SlurmError as exc:
        io.err.write(f"hsbatch: error: {exc}\n")
        return 1
    _relay(io.out, result.stdout)
    _relay(io.err, result.stderr)
    rc = result.returncode
    return 128 - rc if rc < 0 else rc


def _relay(sink: TextSink, text: str) -> None:
    """sbatch's output as it came: its very bytes where the sink takes bytes (in a Latin-1
    locale `café` stays UTF-8 and `名前` cannot fail to encode), else the text."""
    if isinstance(sink, ByteSink):
        from slurm_hase.slurm.runner import STREAM_BYTES  # loaded already: the CLI's runner

        sink.write_bytes(text.encode(*STREAM_BYTES))
    else:
        sink.write(text)


def _no_nodes_fit(stderr: str) -> bool:
    """Whether sbatch submitted nothing for a reason a GPU-type constraint can cause."""
    return REFUSED in stderr and any(reason in stderr for reason in NO_NODES_FIT)
