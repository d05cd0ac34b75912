"""GPU probe on a node whose GPUs are in MIG mode (a fake nvml with pynvml's MIG calls:
nvmlDeviceGetMigMode, nvmlDeviceGetMaxMigDeviceCount, nvmlDeviceGetMigDeviceHandleByIndex).
The real thing needs a MIG GPU: the `gpu`-marked probe test runs where one exists."""

from __future__ import annotations

from typing import Any

from slurm_hase.mps.probe import gres_lines, probe
from tests.unit.test_probe import FakeNvml, FakeNVMLError

A100 = ("NVIDIA A100-SXM4-40GB", (8, 0), 0, 0, 40)
V100 = ("Tesla V100-SXM2-16GB", (7, 0), 0, 1, 16)


class MigNvml(FakeNvml):
    """`instances`: physical GPU index -> its MIG instances' NVML names by slot (None: empty
    slot); a GPU not in it has MIG off, and a pre-Ampere one (V100) has no MIG at all."""

    NVML_DEVICE_MIG_ENABLE = 1

    def __init__(self, devices: list[tuple[Any, ...]],
                 instances: dict[int, list[str | None]]) -> None:
        super().__init__(devices)  # type: ignore[arg-type]
        self.instances = instances

    def nvmlDeviceGetMigMode(self, h: int) -> list[int]:  # noqa: N802 - pynvml's names
        if "V100" in self.devices[h][0]:
            raise FakeNVMLError("Not Supported")
        return [1 if h in self.instances else 0, 0]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: int) -> int:  # noqa: N802
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: int, slot: int) -> tuple[int, int]:  # noqa: N802
        names = self.instances[h]
        if slot >= len(names) or names[slot] is None:
            raise FakeNVMLError("Not Found")
        return (h, slot)

    def nvmlDeviceGetName(self, h: Any) -> Any:  # noqa: N802
        if isinstance(h, tuple):
            return self.instances[h[0]][h[1]]
        return super().nvmlDeviceGetName(h)


def test_a_gpu_in_mig_mode_lists_its_instances_as_catalog_types() -> None:
    one_g = "NVIDIA A100-SXM4-40GB MIG 1g.5gb"
    nvml = MigNvml([A100, V100], {0: [one_g, one_g, None, "NVIDIA A100-SXM4-40GB MIG 3g.20gb"]})
    a100, v100 = probe(nvml).gpus
    assert a100.type_key == "a100"
    assert a100.mig_instances == ("a100_1g.5gb", "a100_1g.5gb", "a100_3g.20gb")
    assert not a100.mps_capable and "MIG mode" in a100.mps_note
    assert v100.mig_instances == () and v100.mps_shareable  # no MIG on a V100: as before
    lines = gres_lines(probe(nvml).gpus, "n1")
    assert lines[0] == "NodeName=n1 AutoDetect=nvml"
    assert lines[1] == "# MIG mode on GPU 0: a100_1g.5gb x2, a100_3g.20gb x1; whole GPUs: v100"
    assert "slurmd -G" in lines[2] and not any("Name=mps" in ln for ln in lines[:2])


def test_mig_mode_off_and_an_old_pynvml_probe_as_before() -> None:
    off = MigNvml([A100], {})
    (gpu,) = probe(off).gpus
    assert gpu.mig_instances == () and gpu.mps_shareable
    assert gres_lines((gpu,), "n1")[0] == "NodeName=n1 Name=gpu Type=a100 File=/dev/nvidia0"
    (old,) = probe(FakeNvml([A100])).gpus  # no nvmlDeviceGetMigMode at all
    assert old.mig_instances == ()
