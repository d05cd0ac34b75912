"""Build hook: setup.cfg holds the metadata. With HASE_COMPILE=1 the modules every scheduling
cycle runs through are compiled to C extensions with mypyc (needs mypy, a C compiler and the
Python headers); the pure-Python modules stay beside them as the fallback:

    HASE_COMPILE=1 pip install --no-build-isolation .      # after: pip install mypy

The simulator's speed bench builds the same list into .build/compiled (bench/compiled.py).
"""

import os

from setuptools import setup

# The policies, the daemon's cycle (state, records, planning, acting) and the simulated Slurm's
# scheduler: 77% of a 100,000-job simulation's time in pure Python (bench/README.md). Not the
# simulator's engine or SimSlurm: compiling them gains nothing measurable and SimSlurm's views
# are built with object.__new__ on a plain dataclass.
COMPILED = [
    "slurm_hase/policy/__init__.py",
    "slurm_hase/policy/common.py",
    "slurm_hase/policy/fair.py",
    "slurm_hase/policy/fifo.py",
    "slurm_hase/policy/gavel.py",
    "slurm_hase/policy/hase.py",
    "slurm_hase/policy/levels.py",
    "slurm_hase/policy/lp.py",
    "slurm_hase/policy/order.py",
    "slurm_hase/policy/pairing.py",
    "slurm_hase/policy/registry.py",
    "slurm_hase/policy/rotate.py",
    "slurm_hase/policy/route.py",
    "slurm_hase/policy/types.py",
    "slurm_hase/policy/usage.py",
    "slurm_hase/daemon/act.py",
    "slurm_hase/daemon/cycle.py",
    "slurm_hase/daemon/digest.py",
    "slurm_hase/daemon/records.py",
    "slurm_hase/daemon/requeue.py",
    "slurm_hase/daemon/reset.py",
    "slurm_hase/daemon/safety.py",
    "slurm_hase/daemon/state.py",
    "slurm_hase/sim/sched.py",
]


def compiled_extensions() -> list:  # type: ignore[type-arg]
    """The mypyc extensions of COMPILED when HASE_COMPILE=1, else none."""
    if os.environ.get("HASE_COMPILE") != "1":
        return []
    from mypyc.build import mypycify

    return mypycify(COMPILED, opt_level="3", multi_file=True)


if __name__ == "__main__":
    setup(ext_modules=compiled_extensions())
