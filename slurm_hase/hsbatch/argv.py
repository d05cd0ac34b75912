"""hsbatch's own command-line options (--hase-*), taken out of the argv that goes to sbatch.

A bad --hase-* option raises UsageError (exit 2, nothing submitted), with close matches.
"""

from __future__ import annotations

from collections.abc import Sequence

from slurm_hase.errors import DescriptorError
from slurm_hase.hsbatch.sbatch_opts import HASE_PREFIX, SPANK_OPTIONS, Scan, VersionFn, scan

FLAGS = frozenset({"hase-explain", "hase-no-constraint"})
VALUED = frozenset({"hase-descriptor", "hase-predictor"})


def _key_options() -> frozenset[str]:
    from slurm_hase.hsbatch.describe import alias_names

    keys = alias_names()
    return frozenset({HASE_PREFIX + k for k in keys} | {HASE_PREFIX + k.replace("_", "-") for k in keys})


class UsageError(DescriptorError):
    """A bad ``--hase-*`` option (exit 2, nothing submitted)."""


class HaseOptions:
    """hsbatch's own options, taken out of the command line."""

    __slots__ = ("explain", "no_constraint", "descriptor_file", "predictor", "pairs",
                 "mps_option")

    def __init__(self) -> None:
        self.explain = False
        self.no_constraint = False
        self.descriptor_file: str | None = None
        self.predictor: str | None = None
        self.pairs: list[tuple[str, str]] = []
        self.mps_option: str | None = None  # --hase-mps's value (passed on to sbatch too)


def split_argv(argv: Sequence[str], version: VersionFn | None = None
               ) -> tuple[list[str], HaseOptions, Scan]:
    """(sbatch's argv with every --hase-* option removed, our options, scan of sbatch's argv);
    `version`: Slurm's, asked only where it decides what an option name means (scan)."""
    keyed = _key_options() if any(w.startswith("--" + HASE_PREFIX) for w in argv) else frozenset()
    first = scan(argv, is_ours=keyed | VALUED, version=version)
    opts = HaseOptions()
    drop: set[int] = set()
    for o in first.opts:
        if not o.name.startswith(HASE_PREFIX):
            continue
        # the SPANK plugin's options are sbatch's own where the plugin is installed, so they go
        # to sbatch as given; --hase-mps's share also tells the description (its key mps)
        if o.name in SPANK_OPTIONS:
            if o.name == "hase-mps":
                opts.mps_option = o.value
            continue
        drop.update(range(o.start, o.end))
        if o.name in FLAGS:
            if o.value is not None:
                raise UsageError(f"--{o.name} takes no value")
            setattr(opts, o.name[len(HASE_PREFIX):].replace("-", "_"), True)
        elif o.name in VALUED or o.name in keyed:
            if o.value is None:
                raise UsageError(f"--{o.name} needs a value")
            if o.name == "hase-descriptor":
                opts.descriptor_file = o.value
            elif o.name == "hase-predictor":
                opts.predictor = o.value
            else:
                opts.pairs.append((o.name[len(HASE_PREFIX):], o.value))
        else:
            raise UsageError(
                f"unknown option --{o.name} ({_option_hint(o.name)}hsbatch knows --hase-explain, "
                "--hase-descriptor, --hase-predictor, --hase-no-constraint and --hase-KEY=VALUE; "
                "see hsbatch --help)"
            )
    rest = [w for i, w in enumerate(argv) if i not in drop]
    return rest, opts, scan(rest, version=version) if drop else first


def _option_hint(name: str) -> str:
    """'did you mean --hase-model? ' for a mistyped or capitalised --hase- option, or ''."""
    import difflib

    from slurm_hase.predict.descriptor import unknown_key_hint

    wanted = name.lower().replace("_", "-")
    ours = sorted(FLAGS | VALUED | SPANK_OPTIONS | _key_options())
    close = [wanted] if wanted in ours else difflib.get_close_matches(wanted, ours, n=2)
    if close:
        return f"did you mean {' or '.join('--' + c for c in close)}? "
    key_hint = unknown_key_hint(name[len(HASE_PREFIX):])  # 'did you mean batch_size? ' or ''
    return key_hint.replace("did you mean ", "did you mean --hase-").replace("_", "-")
