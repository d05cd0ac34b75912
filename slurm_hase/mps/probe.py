"""Probe this node's real NVIDIA GPUs through NVML (pynvml) and suggest gres.conf lines."""

from __future__ import annotations

import contextlib
import importlib
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from slurm_hase.errors import GpuProbeError, HaseError

COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}
MPS_MIN_CC = (3, 5)  # MPS needs Kepler GK110 (sm_35) or newer
UNKNOWN_CC = "unknown"  # compute capability when this pynvml cannot report it
_VENDOR = {"nvidia", "tesla", "geforce", "quadro", "virtualized"}
_FORM = re.compile(r"^(pcie|sxm\d?|nvl|hbm\d?e?|\d+gb|mig|cts|dgxs?)$")

TypeResolver = Callable[[str], str]


@dataclass(frozen=True)
class GpuInfo:
    """One physical GPU as NVML reports it, plus its canonical type key."""

    index: int
    name: str
    uuid: str
    memory_mib: int
    compute_capability: str  # "8.0", or UNKNOWN_CC
    compute_mode: str  # default | exclusive_process | prohibited | exclusive_thread
    minor_number: int  # N in /dev/nvidiaN
    type_key: str
    # type keys of its MIG instances when MIG mode is on (a100_1g.5gb: predict/mig.py); () = off
    mig_instances: tuple[str, ...] = ()

    @property
    def mps_capable(self) -> bool:
        """MPS can run here: known new enough, and compute mode lets processes in."""
        if self.compute_capability == UNKNOWN_CC:
            return False
        major, minor = (int(p) for p in self.compute_capability.split("."))
        return ((major, minor) >= MPS_MIN_CC and not self.mig_instances
                and self.compute_mode in ("default", "exclusive_process"))

    @property
    def mps_shareable(self) -> bool:
        """Jobs can share it through slurm-hase's per-job MPS daemons (compute mode default):
        on an exclusive_process GPU, the second job's MPS server cannot create a context."""
        return self.mps_capable and self.compute_mode == "default"

    @property
    def mps_note(self) -> str:
        """Why an otherwise usable GPU cannot be shared through MPS; "" when nothing to say."""
        if self.mig_instances:
            return (f"GPU {self.index}: MIG mode ({len(self.mig_instances)} instance(s)): "
                    "not shared through slurm-hase's MPS")
        if self.compute_capability == UNKNOWN_CC:
            return (f"GPU {self.index}: compute capability unknown (this pynvml has no "
                    "nvmlDeviceGetCudaComputeCapability, or NVML could not answer it for this "
                    "GPU; pip install -U nvidia-ml-py): MPS support not checked, left out of "
                    "Name=mps")
        if self.mps_capable and not self.mps_shareable:
            return (f"GPU {self.index}: compute mode exclusive_process admits one process: with "
                    "per-job MPS daemons only one job at a time can use it, a second job's MPS "
                    f"server fails; left out of Name=mps (to share it: nvidia-smi -i {self.index} "
                    "-c DEFAULT)")
        return ""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready view."""
        return {**asdict(self), "mps_capable": self.mps_capable,
                "mps_shareable": self.mps_shareable, "mps_note": self.mps_note}


@dataclass(frozen=True)
class ProbeResult:
    """Driver version and GPUs of this node."""

    driver_version: str
    gpus: tuple[GpuInfo, ...]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready view."""
        return {"driver_version": self.driver_version, "gpus": [g.as_dict() for g in self.gpus]}


def normalise_name(name: str) -> str:
    """Fallback type key: "NVIDIA A100-SXM4-40GB" -> "a100", "GeForce RTX 2080 Ti" -> "rtx2080ti"."""
    words = re.sub(r"[^a-z0-9]+", " ", name.lower()).split()
    kept = [w for w in words if w not in _VENDOR and not _FORM.match(w)]
    return "".join(kept) or "gpu"


def catalog_type_key(name: str) -> str:
    """Canonical key from slurm_hase.predict.catalog when it knows the name, else normalise_name."""
    try:
        catalog = importlib.import_module("slurm_hase.predict.catalog")
        spec = catalog.resolve_gpu(name)
        return str(spec.key)
    except (ImportError, AttributeError, HaseError, KeyError, ValueError):
        return normalise_name(name)


def load_nvml() -> Any:
    """Import pynvml lazily (it warns about its own deprecation on import)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return importlib.import_module("pynvml")
    except ImportError as exc:
        raise GpuProbeError(f"pynvml is not installed ({exc}); pip install nvidia-ml-py (NVIDIA's package of the pynvml module)") from None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _compute_capability(nvml: Any, handle: Any, error: type[BaseException]) -> str:
    """ "8.0", or UNKNOWN_CC where pynvml predates nvmlDeviceGetCudaComputeCapability or NVML
    cannot answer it (a driver or vGPU that does not support the query): that GPU is left out
    of MPS, not the whole probe."""
    query = getattr(nvml, "nvmlDeviceGetCudaComputeCapability", None)
    if query is None:
        return UNKNOWN_CC
    try:
        major, minor = query(handle)
    except error:
        return UNKNOWN_CC
    return f"{int(major)}.{int(minor)}"


def _init_failure(nvml: Any, exc: BaseException) -> str:
    """Why nvmlInit failed, in words: "no NVIDIA driver found" only when there is none."""
    code = getattr(exc, "value", None)

    def is_(name: str) -> bool:
        return code is not None and code == getattr(nvml, name, object())

    if is_("NVML_ERROR_LIB_RM_VERSION_MISMATCH"):
        return (f"the NVIDIA kernel driver and the NVML library of this node differ in version "
                f"(NVML: {exc}): usually a driver upgrade without a reboot; reboot the node, or "
                "reload the nvidia kernel modules")
    if is_("NVML_ERROR_NO_PERMISSION"):
        return (f"the NVIDIA driver refuses this user (NVML: {exc}): run as root or as a user "
                "who may open /dev/nvidia*")
    known = ("NVML_ERROR_LIBRARY_NOT_FOUND", "NVML_ERROR_DRIVER_NOT_LOADED")
    if code is None or any(is_(name) for name in known):
        return f"no NVIDIA driver found (NVML: {exc})"
    return f"NVML could not start (NVML: {exc})"


def probe(nvml: Any | None = None, resolve: TypeResolver | None = None) -> ProbeResult:
    """List the GPUs; raises GpuProbeError with NVML's reason when there is no driver/GPU."""
    nvml = nvml if nvml is not None else load_nvml()
    resolve = resolve or catalog_type_key
    error: type[BaseException] = getattr(nvml, "NVMLError", Exception)
    try:
        nvml.nvmlInit()
    except (error, OSError) as exc:
        raise GpuProbeError(_init_failure(nvml, exc)) from None
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        gpus = []
        for index in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            name = _text(nvml.nvmlDeviceGetName(handle))
            mode = int(nvml.nvmlDeviceGetComputeMode(handle))
            gpus.append(GpuInfo(
                index=index,
                name=name,
                uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                memory_mib=int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // (1024 * 1024),
                compute_capability=_compute_capability(nvml, handle, error),
                compute_mode=COMPUTE_MODES.get(mode, f"unknown({mode})"),
                minor_number=int(nvml.nvmlDeviceGetMinorNumber(handle)),
                type_key=resolve(name),
                mig_instances=tuple(resolve(n) for n in _mig_names(nvml, handle, error)),
            ))
    except (error, OSError) as exc:
        raise GpuProbeError(f"NVML query failed: {exc}") from None
    except AttributeError as exc:  # an older pynvml without a function the probe needs
        raise GpuProbeError(f"this pynvml is too old ({exc}); pip install -U nvidia-ml-py") from None
    finally:
        with contextlib.suppress(error, OSError):
            nvml.nvmlShutdown()
    if not gpus:
        raise GpuProbeError(f"NVIDIA driver {driver} is loaded but reports no GPUs")
    return ProbeResult(driver_version=driver, gpus=tuple(gpus))


def _mig_names(nvml: Any, handle: Any, error: type[BaseException]) -> list[str]:
    """NVML's names of the GPU's MIG instances ("NVIDIA A100-SXM4-40GB MIG 1g.5gb") when MIG
    mode is on; [] when it is off, the GPU has no MIG (NVML says not supported) or this pynvml
    predates MIG."""
    get_mode = getattr(nvml, "nvmlDeviceGetMigMode", None)
    if get_mode is None:
        return []
    try:
        current = get_mode(handle)[0]
    except error:
        return []
    if current != getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1):
        return []
    names = []
    for slot in range(int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))):
        try:
            instance = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except error:  # no instance in this slot
            continue
        names.append(_text(nvml.nvmlDeviceGetName(instance)))
    return names


def _ranges(numbers: Sequence[int]) -> str:
    """[0,1,2,5] -> "0-2,5"."""
    runs: list[list[int]] = []
    for n in sorted(set(numbers)):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _files(gpus: Sequence[GpuInfo]) -> str:
    minors = [g.minor_number for g in gpus]
    if len(minors) == 1:
        return f"/dev/nvidia{minors[0]}"
    return f"/dev/nvidia[{_ranges(minors)}]"


def gres_lines(gpus: Sequence[GpuInfo], node: str, mps: bool = True) -> list[str]:
    """Suggested gres.conf lines (one per GPU type, MPS 100 per shareable GPU, a comment for each
    GPU left out of MPS for a reason worth fixing) and the slurm.conf Gres. A node with a GPU in
    MIG mode gets AutoDetect=nvml instead: Slurm finds MIG instances (and the node's other GPUs)
    itself and names their types; `slurmd -G` shows them, for slurm.conf."""
    mig = [g for g in gpus if g.mig_instances]
    if mig:
        counts: dict[str, int] = {}
        for gpu in mig:
            for key in gpu.mig_instances:
                counts[key] = counts.get(key, 0) + 1
        listed = ", ".join(f"{key} x{n}" for key, n in sorted(counts.items()))
        whole = sorted({g.type_key for g in gpus if not g.mig_instances})
        return [f"NodeName={node} AutoDetect=nvml",
                f"# MIG mode on GPU {_ranges([g.index for g in mig])}: {listed}"
                + (f"; whole GPUs: {', '.join(whole)}" if whole else ""),
                f"# slurm.conf: NodeName={node} Gres=<the gpu types `slurmd -G` lists> "
                "Features=<the same type names> (slurm-hase reads MIG types as AutoDetect names "
                "them, nvidia_a100-sxm4-40gb_1g.5gb, and as sites do, a100_1g.5gb); no Name=mps "
                "lines: MPS is not shared across MIG instances here"]
    by_type: dict[str, list[GpuInfo]] = {}
    for gpu in gpus:
        by_type.setdefault(gpu.type_key, []).append(gpu)
    lines = [f"NodeName={node} Name=gpu Type={key} File={_files(group)}"
             for key, group in sorted(by_type.items())]
    gres = [f"gpu:{key}:{len(group)}" for key, group in sorted(by_type.items())]
    sharable = [g for g in gpus if g.mps_shareable]
    if mps and sharable:
        lines.append(f"NodeName={node} Name=mps Count={100 * len(sharable)} File={_files(sharable)}")
        gres.append(f"mps:{100 * len(sharable)}")
    if mps:
        lines.extend(f"# {g.mps_note}" for g in gpus if g.mps_note)
    features = ",".join(sorted(by_type))
    lines.append(f"# slurm.conf: NodeName={node} Gres={','.join(gres)} Features={features}")
    return lines
