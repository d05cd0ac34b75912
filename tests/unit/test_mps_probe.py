"""GPU probe with a fake `pynvml` module: an old pynvml without compute capability, and
exclusive_process GPUs, which per-job MPS daemons cannot share."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from click.testing import CliRunner

from slurm_hase.cli.main import cli
from slurm_hase.errors import GpuProbeError
from slurm_hase.mps.probe import UNKNOWN_CC, gres_lines, probe

# name, compute mode, minor number
GPUS = [("NVIDIA A100-SXM4-40GB", 0, 0), ("NVIDIA A100-SXM4-40GB", 3, 1)]


class FakeNVMLError(Exception):
    """Stands in for pynvml.NVMLError."""


@dataclass
class _Mem:
    total: int


def fake_pynvml(cc: tuple[int, int] | None = (8, 0), minor: bool = True) -> types.ModuleType:
    """A pynvml module; cc=None: one too old for nvmlDeviceGetCudaComputeCapability."""
    mod = types.ModuleType("pynvml")
    funcs = {
        "NVMLError": FakeNVMLError,
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlSystemGetDriverVersion": lambda: b"418.40",
        "nvmlDeviceGetCount": lambda: len(GPUS),
        "nvmlDeviceGetHandleByIndex": lambda i: i,
        "nvmlDeviceGetName": lambda h: GPUS[h][0].encode(),
        "nvmlDeviceGetUUID": lambda h: f"GPU-{h}",
        "nvmlDeviceGetMemoryInfo": lambda h: _Mem(40 * 1024**3),
        "nvmlDeviceGetComputeMode": lambda h: GPUS[h][1],
    }
    if minor:
        funcs["nvmlDeviceGetMinorNumber"] = lambda h: GPUS[h][2]
    if cc is not None:
        funcs["nvmlDeviceGetCudaComputeCapability"] = lambda h: cc
    for name, value in funcs.items():
        setattr(mod, name, value)
    return mod


@pytest.fixture()
def old_pynvml(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """`import pynvml` finds one without nvmlDeviceGetCudaComputeCapability."""
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(cc=None))
    yield


def test_old_pynvml_gives_unknown_compute_capability(old_pynvml: None) -> None:
    result = probe()
    assert [g.compute_capability for g in result.gpus] == [UNKNOWN_CC, UNKNOWN_CC]
    gpu = result.gpus[0]
    assert not gpu.mps_capable and not gpu.mps_shareable
    assert "pip install -U nvidia-ml-py" in gpu.mps_note
    assert result.as_dict()["gpus"][0]["compute_capability"] == "unknown"


def test_a_compute_capability_nvml_cannot_answer_leaves_that_gpu_unknown(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a driver or vGPU without the query: NVML raises (before, "NVML query failed" ended the
    # whole probe)
    mod = fake_pynvml()

    def unsupported(h: int) -> tuple[int, int]:
        if h == 1:
            raise FakeNVMLError("Not Supported")
        return (8, 0)

    mod.nvmlDeviceGetCudaComputeCapability = unsupported  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    result = probe()
    assert [g.compute_capability for g in result.gpus] == ["8.0", UNKNOWN_CC]
    assert "NVML could not answer it" in result.gpus[1].mps_note


def test_old_pynvml_cli_table_and_gres(old_pynvml: None) -> None:
    res = CliRunner().invoke(cli, ["gpu", "probe"])
    assert res.exit_code == 0, res.output
    row = res.output.splitlines()[2].split()
    assert row[-4:-1] == ["?", "default", "?"]  # cc, mode, mps
    assert "note: GPU 0: compute capability unknown" in res.output
    res = CliRunner().invoke(cli, ["gpu", "probe", "--gres", "--node", "n1"])
    assert res.exit_code == 0, res.output
    assert not [ln for ln in res.output.splitlines() if ln.startswith("NodeName=n1 Name=mps")]
    assert "# GPU 0: compute capability unknown" in res.output


def test_pynvml_missing_another_function_is_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(minor=False))
    with pytest.raises(GpuProbeError, match=r"this pynvml is too old \(.*nvmlDeviceGetMinorNumber"):
        probe()


def test_exclusive_process_is_not_shareable_between_jobs() -> None:
    default, exclusive = probe(fake_pynvml()).gpus
    assert default.mps_shareable and default.mps_note == ""
    assert exclusive.mps_capable and not exclusive.mps_shareable
    assert "only one job at a time" in exclusive.mps_note
    assert "nvidia-smi -i 1 -c DEFAULT" in exclusive.mps_note
    assert gres_lines([default, exclusive], "n1") == [
        "NodeName=n1 Name=gpu Type=a100 File=/dev/nvidia[0-1]",
        "NodeName=n1 Name=mps Count=100 File=/dev/nvidia0",
        f"# {exclusive.mps_note}",
        "# slurm.conf: NodeName=n1 Gres=gpu:a100:2,mps:100 Features=a100",
    ]


def test_exclusive_process_cli_column(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    res = CliRunner().invoke(cli, ["gpu", "probe"])
    assert res.exit_code == 0, res.output
    rows = [ln.split() for ln in res.output.splitlines()[2:4]]
    assert [r[-2] for r in rows] == ["yes", "one"]
    assert "note: GPU 1: compute mode exclusive_process" in res.output
    res = CliRunner().invoke(cli, ["gpu", "probe", "--json"])
    assert '"mps_shareable": false' in res.output
