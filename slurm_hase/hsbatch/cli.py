"""``hsbatch``: sbatch plus a workload description and per-GPU-type predictions.

Kept thin and light: no click, numpy or LightGBM on this path (startup time counts).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from slurm_hase.hsbatch.core import Deps, Io, run
from slurm_hase.slurm.runner import SubprocessRunner


def _read_stdin() -> str:
    data = sys.stdin.buffer.read() if sys.stdin is not None else b""
    return data.decode("utf-8", "surrogateescape")


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point; returns sbatch's exit code.

    Called without ``argv`` (as the program), it ends the process itself once stdout and stderr
    are flushed: the interpreter's teardown (freeing every module and the predictor's trees)
    costs tens of milliseconds and does nothing hsbatch needs. Called with ``argv``, it returns.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    io = Io(read_stdin=_read_stdin, out=sys.stdout, err=sys.stderr, env=os.environ)
    deps = Deps(runner=SubprocessRunner(), sbatch=os.environ.get("HSBATCH_SBATCH", "sbatch"),
                cache=True)
    try:
        code = run(args, io, deps)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    if argv is None:
        os._exit(code)  # everything is flushed and no thread or child is left (startup time)
    return code


if __name__ == "__main__":
    sys.exit(main())
