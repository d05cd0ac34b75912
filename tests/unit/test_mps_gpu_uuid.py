"""The MPS prolog starts the job's daemon on the job's own GPUs, named by UUID.

Slurm names a GPU by its device file's number (/dev/nvidiaN: the driver's minor number), which
need not follow the PCI bus (nor nvidia-smi's index). The prolog translates each number to the
GPU's UUID through /proc/driver/nvidia/gpus/<bus id>/information, and records the Slurm numbers
the daemon serves, in its order, in <pipe>/slurm-gpus for the SPANK plugin. Without that tree
(no NVIDIA driver: the fake-GPU test cluster) it falls back to CUDA_DEVICE_ORDER=PCI_BUS_ID and
the numbers, saying so once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hase.mps.render import GPU_INFO_DIR, MpsConfig, render, write_scripts
from tests.unit.test_mps_scripts import _calls, _daemon_env, _run, node

__all__ = ["node"]  # the fixture, used by name

# four GPUs whose minor numbers run against the PCI bus order (bus 01 is /dev/nvidia3)
BUSES = {"0000:01:00.0": 3, "0000:41:00.0": 2, "0000:81:00.0": 1, "0000:c1:00.0": 0}


def _uuid(minor: int) -> str:
    return f"GPU-{minor:08x}-1111-2222-3333-44444444444{minor}"


def _proc_tree(root: Path, buses: dict[str, int] | None = None) -> Path:
    """A fake /proc/driver/nvidia/gpus: one information file per GPU, as the driver writes it."""
    gpus = root / "proc-gpus"
    for bus, minor in (buses or BUSES).items():
        (gpus / bus).mkdir(parents=True)
        (gpus / bus / "information").write_text(
            "Model: \t\t NVIDIA A100-SXM4-40GB\n"
            "IRQ:   \t\t 180\n"
            f"GPU UUID: \t {_uuid(minor)}\n"
            "Video BIOS: \t 92.00.45.00.03\n"
            "Bus Type: \t PCIe\n"
            "DMA Size: \t 47 bits\n"
            "DMA Mask: \t 0x7fffffffffff\n"
            f"Bus Location: \t {bus}\n"
            f"Device Minor: \t {minor}\n"
            "GPU Excluded:\t No\n")
    return gpus


def _prolog(node: dict[str, Path], gpu_info_dir: Path) -> Path:
    cfg = MpsConfig(pipe_dir=str(node["pipe"]), log_dir=str(node["log"]), syslog=False,
                    start_timeout_s=1)
    return write_scripts(cfg, node["root"] / "out", gpu_info_dir=str(gpu_info_dir))["prolog"]


def _daemon_gpus(node: dict[str, Path]) -> str:
    first = _calls(node)[0]
    assert first.startswith("args=[-d] "), first
    return first.split(" gpus=[")[1].rstrip("]")


def _slurm_gpus(node: dict[str, Path]) -> Path:
    return node["pipe"] / "4242" / "slurm-gpus"


def test_default_gpu_info_dir_is_the_drivers() -> None:
    assert GPU_INFO_DIR == "/proc/driver/nvidia/gpus"
    assert "\nGPU_INFO_DIR=/proc/driver/nvidia/gpus  # " in render("prolog", MpsConfig())


@pytest.mark.parametrize(("gpus", "minors"), [("1", [1]), ("1,3", [1, 3]), ("3,0", [3, 0]),
                                              ("0,1,2,3", [0, 1, 2, 3])])
def test_minors_against_pci_order_reach_the_right_gpus(node: dict[str, Path], gpus: str,
                                                       minors: list[int]) -> None:
    """Slurm's "1" is /dev/nvidia1 (bus 81 here); PCI_BUS_ID + "1" made the daemon serve bus 41,
    another job's GPU."""
    prolog = _prolog(node, _proc_tree(node["root"]))
    proc = _run(prolog, node, SLURM_HASE_MPS="50", CUDA_VISIBLE_DEVICES=gpus)
    assert proc.returncode == 0, proc.stderr
    assert _daemon_gpus(node) == ",".join(_uuid(m) for m in minors)
    assert _slurm_gpus(node).read_text() == gpus + "\n"
    assert _slurm_gpus(node).stat().st_mode & 0o777 == 0o644
    assert "no GPU UUID" not in proc.stderr and "PCI_BUS_ID" not in proc.stderr  # no fallback
    assert f"GPUs {gpus} (" in proc.stderr and _uuid(minors[0]) in proc.stderr


def test_slurm_job_gpus_is_translated_too(node: dict[str, Path]) -> None:
    prolog = _prolog(node, _proc_tree(node["root"]))
    proc = _run(prolog, node, SLURM_HASE_MPS="50", CUDA_VISIBLE_DEVICES="", SLURM_JOB_GPUS="2")
    assert proc.returncode == 0, proc.stderr
    assert _daemon_gpus(node) == _uuid(2)
    assert _slurm_gpus(node).read_text() == "2\n"


def test_uuids_and_mig_entries_pass_through(node: dict[str, Path]) -> None:
    prolog = _prolog(node, _proc_tree(node["root"]))
    mig = "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
    proc = _run(prolog, node, SLURM_HASE_MPS="50",
                CUDA_VISIBLE_DEVICES=f"GPU-12345678-0000-0000-0000-000000000000,{mig},1")
    assert proc.returncode == 0, proc.stderr
    assert _daemon_gpus(node) == f"GPU-12345678-0000-0000-0000-000000000000,{mig},{_uuid(1)}"


@pytest.mark.parametrize("tree", ["missing", "empty", "other-gpus"])
def test_no_uuid_falls_back_to_pci_order_and_says_so(node: dict[str, Path], tree: str) -> None:
    """No driver tree (the fake-GPU cluster) or a number it does not list: today's behaviour,
    with one line that says why."""
    gpus, missing = node["root"] / "no-such-dir", 0
    if tree == "empty":
        gpus.mkdir()
    elif tree == "other-gpus":
        gpus, missing = _proc_tree(node["root"], {"0000:01:00.0": 0}), 1  # has 0, not 1
    prolog = _prolog(node, gpus)
    proc = _run(prolog, node, SLURM_HASE_MPS="50", CUDA_VISIBLE_DEVICES="0,1")
    assert proc.returncode == 0, proc.stderr
    assert _daemon_gpus(node) == "0,1"
    assert _daemon_env(node) == ["order=[PCI_BUS_ID] share=[50]"]
    notes = [ln for ln in proc.stderr.splitlines() if "PCI_BUS_ID" in ln]
    assert len(notes) == 1, proc.stderr
    assert f"no GPU UUID for Slurm GPU {missing} in {gpus}/*/information" in notes[0]
    assert "CUDA_VISIBLE_DEVICES=0,1" in notes[0]
    assert _slurm_gpus(node).read_text() == "0,1\n"


def test_default_scripts_fall_back_where_there_is_no_driver(node: dict[str, Path]) -> None:
    """The scripts the tests elsewhere render (default tree, absent on this host) keep working."""
    if Path(GPU_INFO_DIR).is_dir():
        pytest.skip("this host has an NVIDIA driver")
    cfg = MpsConfig(pipe_dir=str(node["pipe"]), log_dir=str(node["log"]), syslog=False,
                    start_timeout_s=1)
    prolog = write_scripts(cfg, node["root"] / "out")["prolog"]
    proc = _run(prolog, node, SLURM_HASE_MPS="50", CUDA_VISIBLE_DEVICES="0")
    assert proc.returncode == 0, proc.stderr
    assert _daemon_gpus(node) == "0" and "no GPU UUID for Slurm GPU 0" in proc.stderr
