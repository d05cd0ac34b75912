"""What an admin installs (`pip install /path/to/slurm-hase`, docs/install.md step 1) carries
everything the docs send them to: the templates under share/slurm-hase/templates, the docs
under share/doc/slurm-hase (the daemon's unit file links daemon.md there), the SPANK plugin's
source under share/slurm-hase/spank, and the shipped
model, training data and their provenance inside the package."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    out = tmp_path_factory.mktemp("wheel")
    # a copy of the source, so that neither a stale build/ in the checkout goes into the wheel
    # nor this build leaves one there
    src = tmp_path_factory.mktemp("src") / "slurm-hase"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", "out",
        "*.so", "*.o"))
    proc = subprocess.run(  # noqa: S603 - argv list
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "-q", "-w", str(out), str(src)],
        capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    wheels = list(out.glob("slurm_hase-*.whl"))
    assert len(wheels) == 1
    with zipfile.ZipFile(wheels[0]) as zf:
        return set(zf.namelist())


def _data(names: set[str], sub: str) -> set[str]:
    """File names under the wheel's .data/data/SUB/ (installed at PREFIX/SUB/)."""
    marker = f".data/data/{sub}/"
    return {n.split(marker, 1)[1] for n in names if marker in n}


def test_wheel_installs_every_template(wheel_names: set[str]) -> None:
    expected = {p.name for p in (REPO / "templates").iterdir() if p.is_file()}
    assert "schedd.toml.example" in expected and "hase-schedd.service.j2" in expected
    assert _data(wheel_names, "share/slurm-hase/templates") == expected


def test_wheel_installs_the_docs(wheel_names: set[str]) -> None:
    expected = {p.name for p in (REPO / "docs").glob("*.md")}
    assert {"install.md", "daemon.md"} <= expected
    assert _data(wheel_names, "share/doc/slurm-hase") == expected


def test_wheel_installs_the_spank_plugin_source(wheel_names: set[str]) -> None:
    # docs/install.md step 4 builds it from <prefix>/share/slurm-hase/spank on a node
    assert _data(wheel_names, "share/slurm-hase/spank") == {
        "hase_mps.c", "hase_mps_gpus.c", "hase_mps.h", "Makefile", "README.md"}


def test_wheel_carries_the_shipped_model_and_its_provenance(wheel_names: set[str]) -> None:
    for name in ("predictor.json", "train_shipped.csv", "gpu_catalog.csv", "PROVENANCE.md",
                 "GAVEL_LICENSE", "gavel_simulation_throughputs.json",
                 "gavel_msr_seed0_2869ce.trace"):
        assert f"slurm_hase/data/{name}" in wheel_names
    assert not any(n.startswith(("tests/", "bench/")) for n in wheel_names)
