"""``hsbatch``: sbatch plus a workload description and per-GPU-type predictions.

Kept thin and light: no click, numpy or LightGBM on this path (startup time counts).
"""

from __future__ import annotations

import contextlib
import io as io_module
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import TextIO

from slurm_hase.hsbatch.core import Deps, Io, run
from slurm_hase.slurm.runner import STREAM_BYTES, RelayingRunner, ignored


def _encoded(text: str, encoding: str) -> bytes:
    """`text` in `encoding`: surrogates (bytes that came undecodable) as those bytes, and a
    character the encoding lacks as a backslash escape."""
    out = bytearray()
    for char in text:
        try:
            out += char.encode(encoding, "surrogateescape")
        except UnicodeEncodeError:
            out += char.encode("ascii", "backslashreplace")
    return bytes(out)


def _read_stdin() -> str:
    data = sys.stdin.buffer.read() if sys.stdin is not None else b""
    return data.decode("utf-8", "surrogateescape")


class ClosedPipeSafe:
    """A text stream whose writes stop quietly once its reader has gone (`hsbatch --help |
    head`) and never fail on a character the locale's encoding lacks: the job may already be
    submitted, so hsbatch still exits with sbatch's code instead of a traceback. sbatch's own
    output goes through `write_bytes`, byte for byte whatever the locale."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.closed_by_reader = False

    def write(self, text: str) -> int:
        if not self.closed_by_reader:
            try:
                return self.stream.write(text)
            except UnicodeEncodeError:  # hsbatch's own words, in a locale that cannot say them
                if getattr(self.stream, "buffer", None) is None:
                    self.write(text.encode("ascii", "backslashreplace").decode("ascii"))
                else:
                    self.write_bytes(_encoded(text, self.stream.encoding or "utf-8"))
            except BrokenPipeError:
                self._reader_gone()
        return len(text)

    def write_bytes(self, data: bytes) -> int:
        """Write `data` as it is, after the text written before it (as text where the stream
        has no bytes underneath: a caller's StringIO)."""
        buffer = getattr(self.stream, "buffer", None)
        if buffer is None:
            self.write(data.decode(*STREAM_BYTES))
        elif not self.closed_by_reader:
            try:
                self.stream.flush()
                buffer.write(data)
            except BrokenPipeError:
                self._reader_gone()
        return len(data)

    def flush(self) -> None:
        if not self.closed_by_reader:
            try:
                self.stream.flush()
            except BrokenPipeError:
                self._reader_gone()

    def _reader_gone(self) -> None:
        self.closed_by_reader = True
        # what is still buffered would fail again when the interpreter closes the stream
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), self.stream.fileno())


@contextlib.contextmanager
def _ctrl_c_goes_to_sbatch() -> Iterator[None]:
    """While sbatch runs, SIGINT does not stop hsbatch: a Ctrl-C reaches sbatch too (the same
    process group), which ends (with `--wait`, the job runs on), and its output, the job's id
    with it, is still relayed. Before and after, Ctrl-C stops hsbatch as usual. A SIGINT the
    user set to be ignored (a background job's) stays ignored, and sbatch inherits that."""
    if threading.current_thread() is not threading.main_thread() or ignored(signal.SIGINT):
        yield
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: None)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point; returns sbatch's exit code.

    Called without ``argv`` (as the program), it ends the process itself once stdout and stderr
    are flushed: the interpreter's teardown (freeing every module and the predictor's trees)
    costs tens of milliseconds and does nothing hsbatch needs. Called with ``argv``, it returns.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    for stream in (sys.stdout, sys.stderr):  # undecodable argv bytes back as they came
        if isinstance(stream, io_module.TextIOWrapper):
            stream.reconfigure(errors="surrogateescape")
    out, err = ClosedPipeSafe(sys.stdout), ClosedPipeSafe(sys.stderr)
    io = Io(read_stdin=_read_stdin, out=out, err=err, env=os.environ)
    runner = RelayingRunner()

    @contextlib.contextmanager
    def shield() -> Iterator[None]:
        # while sbatch runs: Ctrl-C reaches it through the process group, and a SIGTERM or
        # SIGHUP sent to hsbatch alone is passed on to it (RelayingRunner); an ignored
        # signal stays ignored
        with _ctrl_c_goes_to_sbatch(), runner.relaying():
            yield

    deps = Deps(runner=runner, sbatch=os.environ.get("HSBATCH_SBATCH", "sbatch"),
                cache=True, shield=shield)
    try:
        code = run(args, io, deps)
    finally:
        out.flush()
        err.flush()
    if argv is None:
        os._exit(code)  # everything is flushed and no thread or child is left (startup time)
    return code


if __name__ == "__main__":
    sys.exit(main())
