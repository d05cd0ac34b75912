"""The mypyc-compiled build the speed bench can run on, kept apart from the source tree.

    .venv/bin/python bench/compiled.py        # build .build/compiled (about 40 s), or say it is current

The build is a copy of slurm_hase/ with setup.py's COMPILED modules compiled beside their
sources, in .build/compiled: never in the source tree, where a compiled module would shadow
later edits of its .py file. Its SOURCES file holds the digest of the .py files it was built
from; `check()` refuses a build whose sources have changed since.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / ".build" / "compiled"
STAMP = "SOURCES"
_BUILD_FILES = ("setup.py", "setup.cfg", "pyproject.toml", "README.md")


class StaleBuild(RuntimeError):
    """The compiled build is missing or was built from other sources."""


def sources_digest(root: Path = REPO) -> str:
    """sha256 over every .py file of root/slurm_hase and root/setup.py (paths and bytes)."""
    digest = hashlib.sha256()
    files = sorted((root / "slurm_hase").rglob("*.py")) + [root / "setup.py"]
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def compiled_modules() -> list[str]:
    """Dotted names of the modules setup.py compiles."""
    tree = ast.parse((REPO / "setup.py").read_text())  # read, not run: setup.py imports setuptools
    listed = next(ast.literal_eval(node.value) for node in tree.body
                  if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "COMPILED")
    return [p.removesuffix(".py").removesuffix("/__init__").replace("/", ".") for p in listed]


def is_current(build: Path = BUILD) -> bool:
    stamp = build / STAMP
    return stamp.is_file() and stamp.read_text().strip() == sources_digest()


def build(out: Path = BUILD) -> None:
    """Copy the package beside setup.py into `out` and compile COMPILED there in place."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    shutil.copytree(REPO / "slurm_hase", out / "slurm_hase",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    for name in _BUILD_FILES:
        shutil.copy2(REPO / name, out / name)
    digest = sources_digest()
    env = {**os.environ, "HASE_COMPILE": "1"}
    subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace", "-j", "2"],
                   cwd=out, env=env, check=True, stdout=subprocess.DEVNULL)
    (out / STAMP).write_text(digest + "\n")


def check() -> str:
    """What the running process imported: "pure Python", or "mypyc-compiled (N modules)" when
    every COMPILED module came from a current build; StaleBuild for a mixed or stale one."""
    names = compiled_modules()
    loaded = [importlib.import_module(n) for n in names]
    native = [m for m in loaded if not (m.__file__ or "").endswith(".py")]
    if not native:
        return "pure Python"
    if len(native) != len(loaded):
        raise StaleBuild(f"only {len(native)} of {len(loaded)} modules are compiled: rebuild "
                         "with bench/compiled.py")
    where = Path(importlib.import_module("slurm_hase").__file__ or "").resolve().parents[1]
    if not is_current(where):
        raise StaleBuild(f"the compiled build in {where} was made from other sources than "
                         f"{REPO / 'slurm_hase'}: rebuild with bench/compiled.py")
    return f"mypyc-compiled ({len(native)} modules)"


def main() -> int:
    if is_current():
        print(f"{BUILD}: current (built from these sources)")
        return 0
    print(f"building {BUILD} (mypyc, about 40 s)...", file=sys.stderr, flush=True)
    build()
    print(f"{BUILD}: built")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
