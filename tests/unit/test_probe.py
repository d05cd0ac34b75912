"""GPU probe: NVML mapping with a fake nvml module, the no-driver error, gres.conf lines, CLI."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from click.testing import CliRunner

from slurm_hase.cli.main import cli
from slurm_hase.errors import GpuProbeError
from slurm_hase.mps import probe as probe_mod
from slurm_hase.mps.probe import GpuInfo, gres_lines, normalise_name, probe


class FakeNVMLError(Exception):
    """Stands in for pynvml.NVMLError."""


@dataclass
class _Mem:
    total: int


class FakeNvml:
    """The slice of pynvml the probe uses; devices are (name, cc, mode, minor, mem_gib)."""

    NVMLError = FakeNVMLError

    def __init__(self, devices: Sequence[tuple[Any, tuple[int, int], int, int, int]],
                 init_error: str | None = None) -> None:
        self.devices = list(devices)
        self.init_error = init_error
        self.shutdown = 0

    def nvmlInit(self) -> None:  # noqa: N802 - pynvml's names
        if self.init_error:
            raise FakeNVMLError(self.init_error)

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.shutdown += 1

    def nvmlSystemGetDriverVersion(self) -> bytes:  # noqa: N802
        return b"535.104.05"

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:  # noqa: N802
        return i

    def nvmlDeviceGetName(self, h: int) -> Any:  # noqa: N802
        return self.devices[h][0]

    def nvmlDeviceGetUUID(self, h: int) -> str:  # noqa: N802
        return f"GPU-{h:08d}"

    def nvmlDeviceGetMemoryInfo(self, h: int) -> _Mem:  # noqa: N802
        return _Mem(self.devices[h][4] * 1024**3)

    def nvmlDeviceGetCudaComputeCapability(self, h: int) -> tuple[int, int]:  # noqa: N802
        return self.devices[h][1]

    def nvmlDeviceGetComputeMode(self, h: int) -> int:  # noqa: N802
        return self.devices[h][2]

    def nvmlDeviceGetMinorNumber(self, h: int) -> int:  # noqa: N802
        return self.devices[h][3]


MIXED = [
    (b"NVIDIA A100-SXM4-40GB", (8, 0), 0, 0, 40),
    ("NVIDIA A100-SXM4-40GB", (8, 0), 3, 1, 40),
    ("Tesla V100-SXM2-16GB", (7, 0), 2, 2, 16),
    ("Tesla K20c", (3, 0), 0, 3, 5),
]


def test_probe_maps_fields_and_types() -> None:
    nvml = FakeNvml(MIXED)
    result = probe(nvml)
    assert result.driver_version == "535.104.05"
    assert [g.type_key for g in result.gpus] == ["a100", "a100", "v100", "k20c"]
    a = result.gpus[0]
    assert (a.index, a.name, a.uuid, a.memory_mib, a.compute_capability) == (
        0, "NVIDIA A100-SXM4-40GB", "GPU-00000000", 40 * 1024, "8.0")
    assert [g.compute_mode for g in result.gpus] == [
        "default", "exclusive_process", "prohibited", "default"]
    assert [g.mps_capable for g in result.gpus] == [True, True, False, False]
    assert nvml.shutdown == 1
    assert result.as_dict()["gpus"][1]["mps_capable"] is True


def test_probe_uses_injected_resolver() -> None:
    result = probe(FakeNvml(MIXED[:1]), resolve=lambda name: "custom")
    assert result.gpus[0].type_key == "custom"


def test_no_driver_is_typed_error() -> None:
    with pytest.raises(GpuProbeError, match=r"no NVIDIA driver found \(NVML: Driver Not Loaded\)"):
        probe(FakeNvml([], init_error="Driver Not Loaded"))


def test_driver_without_gpus() -> None:
    with pytest.raises(GpuProbeError, match="reports no GPUs"):
        probe(FakeNvml([]))


@pytest.mark.parametrize(("name", "key"), [
    ("NVIDIA A100-SXM4-40GB", "a100"), ("Tesla V100-PCIE-32GB", "v100"), ("Tesla T4", "t4"),
    ("NVIDIA GeForce RTX 2080 Ti", "rtx2080ti"), ("NVIDIA H100 80GB HBM3", "h100"),
    ("Quadro RTX 6000", "rtx6000"), ("???", "gpu"),
])
def test_normalise_name(name: str, key: str) -> None:
    assert normalise_name(name) == key


def test_catalog_key_falls_back_for_unknown_names() -> None:
    assert probe_mod.catalog_type_key("Zorblax 9000 Ultra") == "zorblax9000ultra"
    assert probe_mod.catalog_type_key("Tesla V100-SXM2-16GB") == "v100"


def _gpu(i: int, key: str, minor: int, mode: str = "default") -> GpuInfo:
    return GpuInfo(i, key.upper(), f"u{i}", 1000, "8.0", mode, minor, key)


def test_gres_lines_group_by_type_and_compress_files() -> None:
    gpus = [_gpu(0, "a100", 0), _gpu(1, "a100", 1), _gpu(2, "a100", 2), _gpu(3, "t4", 5),
            _gpu(4, "a100", 7, mode="prohibited")]
    assert gres_lines(gpus, "n1") == [
        "NodeName=n1 Name=gpu Type=a100 File=/dev/nvidia[0-2,7]",
        "NodeName=n1 Name=gpu Type=t4 File=/dev/nvidia5",
        "NodeName=n1 Name=mps Count=400 File=/dev/nvidia[0-2,5]",
        "# slurm.conf: NodeName=n1 Gres=gpu:a100:4,gpu:t4:1,mps:400 Features=a100,t4",
    ]
    assert not any("mps" in ln for ln in gres_lines(gpus, "n1", mps=False))


def test_cli_probe_without_driver_exits_nonzero_cleanly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe_mod, "load_nvml", lambda: FakeNvml([], init_error="NVML Shared Library Not Found"))
    res = CliRunner().invoke(cli, ["gpu", "probe"])
    assert res.exit_code != 0
    assert isinstance(res.exception, GpuProbeError)
    assert "no NVIDIA driver found (NVML: NVML Shared Library Not Found)" in str(res.exception)


def test_main_prints_message_without_traceback(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from slurm_hase.cli.main import main

    monkeypatch.setattr(probe_mod, "load_nvml", lambda: FakeNvml([], init_error="no lib"))
    with pytest.raises(SystemExit) as exc:
        main(["gpu", "probe", "--json"])
    assert exc.value.code == 1
    err = capsys.readouterr().err
    assert err.strip() == "hase: error: no NVIDIA driver found (NVML: no lib)"


def test_cli_probe_json_and_gres(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe_mod, "load_nvml", lambda: FakeNvml(MIXED[:2]))
    res = CliRunner().invoke(cli, ["gpu", "probe", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert [g["type_key"] for g in data["gpus"]] == ["a100", "a100"]
    res = CliRunner().invoke(cli, ["gpu", "probe", "--gres", "--node", "a100-1"])
    assert res.exit_code == 0
    assert res.output.splitlines()[0] == "NodeName=a100-1 Name=gpu Type=a100 File=/dev/nvidia[0-1]"
    res = CliRunner().invoke(cli, ["gpu", "probe"])
    assert res.exit_code == 0 and "a100" in res.output and "GPU-00000001" in res.output


@pytest.mark.gpu
def test_real_probe() -> None:
    try:
        result = probe()
    except GpuProbeError as exc:
        pytest.skip(f"no NVIDIA GPU/driver on this machine: {exc}")
    assert result.gpus and result.driver_version
    for g in result.gpus:
        assert g.uuid.startswith(("GPU-", "MIG-")) and g.memory_mib > 0 and g.type_key
        assert g.compute_capability.count(".") == 1
