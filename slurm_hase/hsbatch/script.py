"""Read a batch script's header: ``#SBATCH`` directives (to see what the user asked for) and
``#HASE key=value`` lines. The script itself is never rewritten; sbatch reads it as it is.

Like sbatch, the header ends at the first line that is neither blank (C's blanks only) nor a
comment; ``#HASE`` lines after it are reported (hsbatch warns), not used.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from typing import NamedTuple

from slurm_hase.errors import DescriptorError
from slurm_hase.hsbatch.sbatch_opts import Opt

MAX_SCRIPT_BYTES = 16 * 1024 * 1024
MAX_HASE_LINE_BYTES = 1024
SBATCH_MAGIC = "#SBATCH"
# sbatch 22.05 still obeys the deprecated "#SLURM" (with an error line urging #SBATCH)
SLURM_MAGIC = "#SLURM"
PBS_MAGIC = "#PBS"  # sbatch reads these too (unless --ignore-pbs); hsbatch does not
BSUB_MAGIC = "#BSUB"  # LSF's, read by sbatch as it reads #PBS (-q is the partition)
HASE_MAGIC = "#HASE"
HET_WORDS = ("hetjob", "packjob")
# what sbatch skips before deciding a line is a command (C's isspace): not U+00A0 nor \x1c,
# which str.strip() also takes for blanks
C_SPACE = " \t\n\v\f\r"


class HaseLine(NamedTuple):
    """One ``key=value`` pair from a ``#HASE`` line."""

    lineno: int
    key: str
    value: str
    text: str  # the whole line, for messages


class Header:
    """What a script's header says."""

    __slots__ = ("directives", "hase", "late_hase", "het", "pbs")

    def __init__(self) -> None:
        self.directives: list[list[str]] = []  # #SBATCH words, per line
        self.hase: list[HaseLine] = []
        self.late_hase: list[int] = []  # line numbers of ignored #HASE lines
        self.het = False
        self.pbs = False  # #PBS/#BSUB directives in the header: sbatch reads them, hsbatch not


def _magic(line: str, magic: str, *, blank: bool = True) -> str | None:
    """The rest of ``line`` if it is a ``magic`` directive, else None. `blank`: a blank must
    follow the magic word (``#HASE``); sbatch takes any line that starts with ``#SBATCH``
    (``#SBATCH--partition=debug`` is a directive)."""
    if not line.startswith(magic):
        return None
    rest = line[len(magic):]
    if blank and rest and not rest[0].isspace():
        return None
    return rest


def _words(rest: str) -> list[str]:
    import shlex  # only scripts with #SBATCH lines pay for it

    try:
        return shlex.split(rest, comments=True)
    except ValueError:  # unbalanced quotes: sbatch will complain itself
        return rest.split()


def parse_header(text: str, label: str) -> Header:
    """Scan ``text``'s header; DescriptorError names ``label`` and the line of a bad #HASE."""
    head = Header()
    in_header = True
    # lines end at "\n" alone, as sbatch reads them (str.splitlines would also break at \x1c,
    # U+2028 and the like, ending the header early and missing the directives after them)
    for lineno, raw in enumerate(text.split("\n"), start=1):
        line = raw.rstrip("\r")
        stripped = line.lstrip(C_SPACE)
        if in_header and stripped and not stripped.startswith("#"):
            in_header = False
        rest = _magic(line, HASE_MAGIC)
        if rest is not None:
            if not in_header:
                head.late_hase.append(lineno)
                continue
            head.hase.extend(_hase_pairs(rest, lineno, line, label))
            continue
        if not in_header:
            continue
        if line.startswith((PBS_MAGIC, BSUB_MAGIC)):
            head.pbs = True
        rest = _magic(line, SBATCH_MAGIC, blank=False)
        if rest is None:
            rest = _magic(line, SLURM_MAGIC, blank=False)
        if rest is not None:
            words = _words(rest)
            if words and words[0] in HET_WORDS:
                head.het = True
            head.directives.append(words)
    return head


def _hase_pairs(rest: str, lineno: int, line: str, label: str) -> list[HaseLine]:
    where = f"{label} line {lineno}"
    if len(line.encode("utf-8", "replace")) > MAX_HASE_LINE_BYTES:
        raise DescriptorError(
            f"{where}: #HASE line is {len(line.encode('utf-8', 'replace'))} bytes "
            f"(at most {MAX_HASE_LINE_BYTES}); the description is oversized"
        )
    words = rest.split("#", 1)[0].split()
    if not words:
        raise DescriptorError(f"{where}: {line.strip()!r}: expected key=value after #HASE")
    pairs: list[HaseLine] = []
    for word in words:
        key, eq, value = word.partition("=")
        if not eq or not key:
            raise DescriptorError(f"{where}: {line.strip()!r}: {word!r} is not key=value")
        pairs.append(HaseLine(lineno, key, value, line.strip()))
    return pairs


def found_script(name: str, chdir: str | None, path_env: str | None) -> str | None:
    """The file sbatch (22.05, proc_args.c search_path) reads for the script `name`, where it
    searches: a name that starts with '.' or '/' is not searched (None: it is read as given);
    otherwise the first readable regular file `name` in the --chdir/-D directory (else the
    current one), then in each directory of `path_env` (PATH; one starting with '.' taken
    inside the first directory). None when there is none: sbatch then reads `name` as given,
    from the current directory (a FIFO or pipe among them)."""
    if name.startswith((".", "/")):
        return None
    first = os.path.abspath(chdir) if chdir is not None else os.getcwd()
    for folder in [first, *(p for p in (path_env or "").split(":") if p)]:
        full = f"{first}/{folder}/{name}" if folder.startswith(".") else f"{folder}/{name}"
        try:
            if os.access(full, os.R_OK) and stat.S_ISREG(os.stat(full).st_mode):
                return full
        except (OSError, ValueError):
            continue
    return None


def read_script(path: str) -> str | None:
    """The script's text for scanning; None if it cannot be read (sbatch will say why)."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_SCRIPT_BYTES)
    except OSError:
        return None
    return data.decode("utf-8", "replace")


def read_once(path: str) -> bytes | None:
    """All of a script that can be read only once (a pipe, a FIFO, the /dev/fd/N of a process
    substitution), which sbatch could then not read again; None for a regular file or a path
    that cannot be read (sbatch reads it itself, or says why)."""
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
            return None
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None


def keep_copy(data: bytes, name: str | None = None) -> str:
    """A private temporary file (mode 0600) holding `data` (a file read once), for sbatch to
    read; the caller removes it once sbatch has returned (sbatch sends a script's text to
    Slurm). `name`: the copy's base name, in a private directory made for it (the caller
    removes that too): a script's copy keeps the script's name, which is sbatch's default job
    name (``%x`` in output paths, ``--dependency=singleton``)."""
    import tempfile

    if name is None:
        fd, path = tempfile.mkstemp(prefix="hsbatch-", suffix=".sh")
    else:
        folder = tempfile.mkdtemp(prefix="hsbatch-")  # mode 0700
        path = os.path.join(folder, name if name not in ("", ".", "..") else "script")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return path


def remove_copies(paths: Sequence[str]) -> None:
    """Remove the copies keep_copy made, in order: files, and the (then empty) directories
    made for them."""
    for path in paths:
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                os.rmdir(path)
            else:
                os.unlink(path)
        except OSError:
            continue


def inherited_fd(value: str) -> int | None:
    """The open descriptor `--export-file=N` names (sbatch reads a number of at least 3 that
    is an open descriptor as one, else as a file name), or None."""
    if not value.isdigit() or int(value) < 3:
        return None
    try:
        os.fstat(int(value))
    except (OSError, OverflowError):
        return None
    return int(value)


def read_fd(fd: int) -> bytes | None:
    """The rest of descriptor `fd` (left open), or None if it cannot be read."""
    try:
        with open(fd, "rb", closefd=False) as fh:
            return fh.read()
    except OSError:
        return None


# options whose file sbatch itself reads when it submits (not on the compute node)
READ_AT_SUBMIT = ("nodefile", "export-file")


def readable_again(argv: Sequence[str], opts: Sequence[Opt], copies: list[str]) -> list[str]:
    """`argv` with the file of each READ_AT_SUBMIT option that can be read only once (the
    /dev/fd/N of `--nodefile=<(...)`, which sbatch's process would not even have open), and the
    descriptor of `--export-file=N` (sbatch's only inherits stdin, stdout and stderr), replaced
    by a private copy (added to `copies`, for the caller to remove)."""
    out = list(argv)
    for o in opts:
        if o.name not in READ_AT_SUBMIT or not o.value:
            continue
        fd = inherited_fd(o.value) if o.name == "export-file" else None
        once = read_fd(fd) if fd is not None else read_once(o.value)
        if once is None:
            continue
        copies.append(keep_copy(once))
        if o.end - o.start == 2:  # --nodefile FILE, -F FILE
            out[o.start + 1] = copies[-1]
        else:  # --nodefile=FILE, -FFILE: the value ends the word
            word = out[o.start]
            out[o.start] = word[:len(word) - len(o.value)] + copies[-1]
    return out
