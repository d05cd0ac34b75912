"""The mypyc-compiled build (setup.py's COMPILED, bench/compiled.py) schedules exactly as the
pure-Python modules do: the same simulations give the same jobs, byte for byte."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import compiled  # noqa: E402


def _buildable() -> str | None:
    """Why the build cannot run here (None: it can)."""
    if shutil.which("gcc") is None and shutil.which("cc") is None:
        return "no C compiler"
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file():
        return "no Python headers (python3-dev)"
    try:
        import mypyc  # noqa: F401
    except ImportError:
        return "no mypyc (pip install mypy)"
    return None


def test_every_listed_module_exists_and_the_policies_are_all_there() -> None:
    names = compiled.compiled_modules()
    for name in names:
        path = REPO / (name.replace(".", "/") + ".py")
        assert path.is_file() or (REPO / name.replace(".", "/") / "__init__.py").is_file(), name
    policies = {p.stem for p in (REPO / "slurm_hase" / "policy").glob("*.py")} - {"__init__"}
    assert {f"slurm_hase.policy.{p}" for p in policies} <= set(names)


def test_the_sources_digest_follows_every_module(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    shutil.copytree(REPO / "slurm_hase", root / "slurm_hase",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(REPO / "setup.py", root / "setup.py")
    before = compiled.sources_digest(root)
    assert before == compiled.sources_digest(REPO)
    target = root / "slurm_hase" / "policy" / "order.py"
    target.write_text(target.read_text() + "\n")
    assert compiled.sources_digest(root) != before


def _simulate(out: Path, env: dict[str, str], *extra: str) -> str:
    """Four policies (rotation on for half the jobs) on the bundled Gavel trace; the process's
    compiled.check() line."""
    args = [sys.executable, "-c", "from slurm_hase.cli.main import main; main()", "simulate",
            "--trace", "gavel",
            "--jobs", "150", "--gpus", "k80=6,p100=6,v100=6", "--policy", "fifo",
            "--policy", "hase", "--policy", "gavel", "--policy", "fair",
            "--checkpoint-share", "0.5", "--out", str(out), "--no-plots", *extra]
    subprocess.run(args, check=True, env=env, capture_output=True, cwd=out.parent)
    probe = "import sys; sys.path.append(sys.argv[1]); from bench import compiled; " \
            "print(compiled.check())"
    return subprocess.run([sys.executable, "-c", probe, str(REPO)], check=True, env=env,
                          capture_output=True, text=True, cwd=out.parent).stdout.strip()


def test_the_compiled_build_gives_the_same_jobs_as_pure_python(tmp_path: Path) -> None:
    why = _buildable()
    if why is not None:
        pytest.skip(f"cannot build the compiled modules here: {why}")
    build = tmp_path / "build"
    compiled.build(build)
    assert compiled.is_current(build)
    empty = tmp_path / "no-data"  # the bundled trace and throughputs, as in a user's clone
    empty.mkdir()
    base = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    base["HASE_DATA_DIR"] = str(empty)
    pure = _simulate(tmp_path / "pure", base)
    # in worker processes: what they are sent and send back pickles in the compiled build too
    native = _simulate(tmp_path / "native", {**base, "PYTHONPATH": str(build)}, "--workers", "2")
    assert pure == "pure Python"
    assert native == f"mypyc-compiled ({len(compiled.compiled_modules())} modules)"
    names = sorted(p.name for p in (tmp_path / "pure").glob("*_jobs.csv"))
    assert names == ["fair_jobs.csv", "fifo_jobs.csv", "gavel_jobs.csv", "hase_jobs.csv"]
    for name in names:
        assert (tmp_path / "native" / name).read_bytes() == (tmp_path / "pure" / name).read_bytes()


def test_a_build_made_from_other_sources_is_refused(tmp_path: Path) -> None:
    build = tmp_path / "build"
    (build / "slurm_hase").mkdir(parents=True)
    (build / compiled.STAMP).write_text("0" * 64 + "\n")
    assert not compiled.is_current(build)
    assert not compiled.is_current(tmp_path / "missing")
