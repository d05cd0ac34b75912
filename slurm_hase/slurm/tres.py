"""Parse and build Slurm TRES / GRES strings for every supported Slurm version.

Shapes handled (all pure string work, no Slurm needed):
- job requests: ``gres:gpu:a100:4`` (<= 23.02), ``gres/gpu:a100:4`` (>= 23.11), ``gres:gpu:1``,
  ``gres/mps:50``, ``gres:shard:4``; comma lists of these;
- node GRES: ``gpu:a100:4,mps:a100:400``, ``gpu:a100:4,shard:32`` (or ``shard:a100:32``), with
  ``(S:0)``, ``(IDX:0-3)`` or ``(0/100,50/100)`` suffixes (commas inside parentheses are not
  separators);
- TRES lists: ``cpu=1,mem=8000M,gres/gpu=1,gres/gpu:a100=1``, ``gres/shard=4``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from slurm_hase.errors import SlurmParseError
from slurm_hase.slurm.types import GpuRequest, Node

Version = tuple[int, int]

_NULLS = {"", "(null)", "N/A", "n/a", "None"}
_SUFFIX = re.compile(r"\([^()]*\)$")


@dataclass(frozen=True)
class GresItem:
    """One GRES entry: name (gpu, mps, ...), optional type, count."""

    name: str
    gres_type: str | None
    count: int


def split_top_level(text: str, sep: str = ",") -> list[str]:
    """Split on `sep` outside parentheses; empty pieces dropped."""
    parts: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(depth - 1, 0)
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _count(text: str, whole: str) -> int:
    """Parse a GRES count with optional K/M/G suffix (Slurm multiplies by 1024)."""
    mult = {"k": 1024, "m": 1024**2, "g": 1024**3}
    t = text.strip()
    factor = 1
    if t and t[-1].lower() in mult:
        factor = mult[t[-1].lower()]
        t = t[:-1]
    if not t.isdigit():
        raise SlurmParseError("GRES string", f"bad count {text!r} in {whole!r}")
    return int(t) * factor


def parse_gres_item(text: str) -> GresItem:
    """Parse one entry: ``gres:gpu:a100:4``, ``gres/gpu:1``, ``gpu:a100:4(S:0)``, ``mps:50``."""
    whole = text
    t = text.strip()
    while _SUFFIX.search(t):
        t = _SUFFIX.sub("", t).strip()
    for prefix in ("gres:", "gres/"):
        if t.startswith(prefix):
            t = t[len(prefix):]
            break
    parts = t.split(":")
    if not parts[0] or any(not p for p in parts) or len(parts) > 3:
        raise SlurmParseError("GRES string", f"unexpected entry {whole!r}")
    name = parts[0]
    if len(parts) == 1:
        return GresItem(name, None, 1)
    if len(parts) == 2:
        if parts[1][:1].isdigit():
            return GresItem(name, None, _count(parts[1], whole))
        return GresItem(name, parts[1], 1)
    return GresItem(name, parts[1], _count(parts[2], whole))


def parse_gres(text: str | None) -> list[GresItem]:
    """Parse a comma list of GRES entries; null markers give []."""
    if text is None or text.strip() in _NULLS:
        return []
    return [parse_gres_item(p) for p in split_top_level(text)]


def parse_tres_list(text: str | None) -> dict[str, str]:
    """``cpu=1,gres/gpu:a100=1`` -> {"cpu": "1", "gres/gpu:a100": "1"}."""
    if text is None or text.strip() in _NULLS:
        return {}
    out: dict[str, str] = {}
    for part in split_top_level(text):
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise SlurmParseError("TRES list", f"entry without '=': {part!r} in {text!r}")
        out[key.strip()] = value.strip()
    return out


def _tres_int(value: str, key: str) -> int:
    try:
        return int(value)
    except ValueError as exc:
        raise SlurmParseError("TRES list", f"non-integer count {value!r} for {key}") from exc


def gpus_from_tres(tres: Mapping[str, str] | str | None) -> dict[str, int]:
    """GPU counts by type from a TRES list; GPUs of no tracked type come back under "" (all of
    them, or the part of ``gres/gpu`` its typed entries leave: AccountingStorageTRES may track
    some types only)."""
    items = parse_tres_list(tres) if tres is None or isinstance(tres, str) else dict(tres)
    typed: dict[str, int] = {}
    total = 0
    for key, value in items.items():
        name = key.replace("gres:", "gres/", 1)
        if name == "gres/gpu":
            total = _tres_int(value, key)
        elif name.startswith("gres/gpu:"):
            typed[name.split(":", 1)[1]] = _tres_int(value, key)
    typed = {k: v for k, v in typed.items() if v > 0}
    rest = total - sum(typed.values())
    return {**typed, "": rest} if rest > 0 else typed


def mps_from_tres(tres: Mapping[str, str] | str | None) -> int:
    """Total MPS share in a TRES list (``gres/mps=50``)."""
    return _gres_total(tres, "gres/mps")


def shards_from_tres(tres: Mapping[str, str] | str | None) -> int:
    """Total GPU shards in a TRES list (``gres/shard=4``; only where AccountingStorageTRES
    tracks gres/shard: Slurm leaves untracked GRES out of ReqTRES and AllocTRES)."""
    return _gres_total(tres, "gres/shard")


def _gres_total(tres: Mapping[str, str] | str | None, name: str) -> int:
    """The untyped total of one GRES in a TRES list (``gres/mps=50``), 0 if absent."""
    items = parse_tres_list(tres) if tres is None or isinstance(tres, str) else dict(tres)
    for key, value in items.items():
        if key.replace("gres:", "gres/", 1) == name:
            return _tres_int(value, key)
    return 0


def with_held(alloc: Mapping[str, int], held: Mapping[str, int] | None) -> dict[str, int]:
    """A node's allocated GPUs by type (AllocTRES) raised to the GPUs its GresUsed shows held
    (gres_used.gpus_in_use: MPS shares and shards hold a GPU that AllocTRES does not count)."""
    out = dict(alloc)
    for gtype, count in (held or {}).items():
        out[gtype] = max(out.get(gtype, 0), count)
    return out


def node_gres_counts(text: str | None) -> tuple[dict[str, int], int]:
    """Node Gres (``gpu:a100:4,mps:a100:400``) -> (GPUs by type, MPS total)."""
    gpus: dict[str, int] = {}
    mps = 0
    for item in parse_gres(text):
        if item.name == "gpu":
            key = item.gres_type or ""
            gpus[key] = gpus.get(key, 0) + item.count
        elif item.name == "mps":
            mps += item.count
    return gpus, mps


def gres_shard_count(text: str | None) -> int:
    """The GPU shards in a GRES list: a node's Gres (``gpu:a100:4,shard:32`` or
    ``shard:a100:32``: Slurm copies the GPUs' type to their shards), or a job's TresPerJob /
    TresPerNode (``gres:shard:4``)."""
    return sum(item.count for item in parse_gres(text) if item.name == "shard")


def asks_shards(tres_per_job: str, tres_per_node: str) -> bool:
    """Whether a job's TresPerJob / TresPerNode ask for GPU shards (a quick test of the text;
    requested_shards counts them)."""
    return "shard" in tres_per_node or "shard" in tres_per_job


def requested_shards(tres_per_job: str | None, tres_per_node: str | None) -> int:
    """Shards a job asks for in its TresPerJob / TresPerNode (``gres:shard:4`` on 22.05,
    ``gres/shard:4`` from 23.11), per node where asked per node; 0 if none. gpu_request leaves
    shards out (the daemon reads a shard job as an MPS share: records.share_on_its_gpus)."""
    for text in (tres_per_job, tres_per_node):
        shards = gres_shard_count(text)
        if shards:
            return shards
    return 0


def gpu_request(tres_per_job: str | None, tres_per_node: str | None) -> GpuRequest | None:
    """The GPU request of a job from its TresPerJob / TresPerNode; None if it asks no GPU."""
    for scope, text in (("job", tres_per_job), ("node", tres_per_node)):
        items = parse_gres(text)
        gpus = [i for i in items if i.name == "gpu"]
        mps = sum(i.count for i in items if i.name == "mps")
        if gpus:
            typed = [i.gres_type for i in gpus if i.gres_type]
            return GpuRequest(sum(i.count for i in gpus), typed[0] if typed else None, scope, mps)
        if mps:
            mps_types = [i.gres_type for i in items if i.name == "mps" and i.gres_type]
            return GpuRequest(0, mps_types[0] if mps_types else None, scope, mps)
    return None


def gres_prefix(version: Version) -> str:
    """``gres:`` up to 23.02, ``gres/`` from 23.11."""
    return "gres/" if tuple(version) >= (23, 11) else "gres:"


def format_gres(name: str, count: int, gres_type: str | None = None) -> str:
    """A --gres style entry without prefix: ``gpu:a100:4`` / ``gpu:1`` / ``mps:50``."""
    return f"{name}:{gres_type}:{count}" if gres_type else f"{name}:{count}"


def format_gpu_tres(count: int, gpu_type: str | None, version: Version) -> str:
    """TresPerJob/TresPerNode value for `count` GPUs: ``gres/gpu:a100:4`` on 24.11."""
    return gres_prefix(version) + format_gres("gpu", count, gpu_type)


def format_mps_tres(share: int, version: Version) -> str:
    """TresPerNode value for an MPS share: ``gres:mps:50`` on 22.05."""
    return gres_prefix(version) + format_gres("mps", share)


def format_request(req: GpuRequest, version: Version) -> str:
    """The TRES string that asks for `req` on `version` (GPUs and MPS, comma separated)."""
    parts: list[str] = []
    if req.count:
        parts.append(format_gpu_tres(req.count, req.gpu_type, version))
    if req.mps:
        parts.append(format_mps_tres(req.mps, version))
    return ",".join(parts)


def node_mps_per_gpu(nodes: Iterable[Node]) -> dict[str, int]:
    """Node -> the MPS count of one of its GPUs (gres/mps over its GPUs), for nodes with both;
    Slurm splits a node's mps count evenly over its GPUs."""
    out: dict[str, int] = {}
    for node in nodes:
        gpus = sum(c for c in node.gpus.values() if c > 0)
        per_gpu = node.mps_total // gpus if gpus > 0 else 0
        if per_gpu > 0:
            out[node.name] = per_gpu
    return out


def node_shards_per_gpu(nodes: Iterable[Node]) -> dict[str, float]:
    """Node -> the shard count of one of its GPUs (gres/shard over its GPUs), for nodes with
    both. Slurm spreads a node's shard count evenly over its GPUs unless gres.conf gives a GPU
    its own Count; the node shows only the total, so this is then their mean (not rounded:
    shard:10 over 4 GPUs is 2.5 a GPU)."""
    out: dict[str, float] = {}
    for node in nodes:
        gpus = sum(c for c in node.gpus.values() if c > 0)
        if gpus > 0 and node.shard_total > 0:
            out[node.name] = node.shard_total / gpus
    return out


def updates_pending_gres(version: str) -> bool:
    """Whether Slurm `version` (``24.11.5``, ``sim-24.11``) applies ``scontrol update
    TresPerNode=gres/mps:N`` to a pending ``--gres=gpu:1`` job: 24.11 runs it with the share;
    22.05 stores the text and still allocates the whole GPU
    (tests/integration/test_gres_update_live.py). Releases in between were not tested."""
    m = re.search(r"(\d+)\.(\d+)", version)
    return m is not None and (int(m[1]), int(m[2])) >= (24, 11)


def mps_share_update(units: int) -> str:
    """The TresPerNode value that asks `units` MPS units of one GPU instead of a whole one."""
    return f"gres/mps:{units}"

def convertible_to_share(gpu: GpuRequest) -> bool:
    """Whether a pending job's request is one the daemon may turn into an MPS share by
    ``TresPerNode=gres/mps:N``: one whole GPU per node, of no pinned type (a pinned type would
    be lost with the gres; PendingJob.may_share)."""
    return gpu.scope == "node" and gpu.count == 1 and gpu.mps == 0 and gpu.gpu_type is None
