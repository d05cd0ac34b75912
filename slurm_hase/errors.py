"""Typed errors raised by the core; only the CLI turns them into messages and exit codes."""

from __future__ import annotations

from collections.abc import Sequence


class HaseError(Exception):
    """Base of every error slurm-hase raises on purpose."""

    exit_code: int = 1


class ConfigError(HaseError):
    """A config or spec file is invalid; the message names the field."""

    exit_code = 2


class SlurmError(HaseError):
    """Base for errors talking to Slurm."""


class SlurmCommandError(SlurmError):
    """A Slurm command exited non-zero."""

    def __init__(self, argv: list[str], returncode: int, stderr: str) -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr.strip()
        super().__init__(f"{' '.join(argv[:3])}... exited {returncode}: {self.stderr or '(no stderr)'}")


class SlurmUnavailableError(SlurmCommandError):
    """slurmctld (or slurmdbd) could not be reached."""


class SlurmTimeoutError(SlurmError):
    """A Slurm command did not answer in time."""

    def __init__(self, argv: list[str], timeout_s: float) -> None:
        self.argv = list(argv)
        self.timeout_s = timeout_s
        super().__init__(f"{argv[0]} did not answer within {timeout_s:g}s")


class SlurmParseError(SlurmError):
    """Slurm output could not be parsed (truncated, not JSON, unknown shape)."""

    def __init__(self, what: str, detail: str) -> None:
        self.what = what
        self.detail = detail
        super().__init__(f"cannot parse {what}: {detail}")


class JobNotFoundError(SlurmError):
    """The job no longer exists in slurmctld (finished, cancelled, purged)."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"job {job_id} not found")


class ClusterError(HaseError):
    """The local test cluster could not be started or stopped."""


class PredictorError(HaseError):
    """The performance predictor failed (bad model file, bad input)."""


class UnknownGpuError(PredictorError):
    """A GPU name matches no catalog entry (bad input: exit 2, like other input errors)."""

    exit_code = 2

    def __init__(self, name: str, close: list[str], why: str = "") -> None:
        self.name = name
        self.close = close
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        super().__init__(f"unknown GPU type {name!r}{f' ({why})' if why else ''}{hint}")


class DataError(HaseError):
    """An input data file (CSV, trace) is invalid; the message names the row."""

    exit_code = 2


class DescriptorError(HaseError):
    """A workload description is invalid; the message names the key."""

    exit_code = 2


class PolicyError(HaseError):
    """Unknown policy or bad policy knobs."""

    exit_code = 2


class StoreError(HaseError):
    """The state store could not be read or written."""


class DaemonRunningError(StoreError):
    """Another `hase schedd run` holds the state store (one daemon per store)."""

    exit_code = 3


class GpuProbeError(HaseError):
    """This node's GPUs could not be probed (no NVIDIA driver, NVML failure)."""


class OptionalDependencyError(HaseError):
    """An optional package (e.g. matplotlib for --plot) is not installed."""


def not_utf8(exc: UnicodeDecodeError, *, at_offset: bool = True) -> str:
    """'not UTF-8 text (byte 0xNN at offset K)': the one wording for undecodable input files.
    `at_offset` False where the offset is not the file's (a decoder fed in chunks)."""
    bad = exc.object[exc.start]
    where = f" at offset {exc.start}" if at_offset else ""
    return f"not UTF-8 text (byte 0x{bad:02x}{where})"


def name_some(names: Sequence[str], limit: int = 5) -> str:
    """"a, b, c" or "a, b, c, d, e and 7 more": the one wording for a list cut short."""
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more
