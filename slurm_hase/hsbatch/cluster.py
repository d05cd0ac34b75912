"""The cluster as hsbatch needs it, and a per-user cache of it (startup time).

A :class:`Summary` is what hsbatch's type judgement reads from Slurm: nodes grouped by
(partitions, usable, typed GPU counts, GPU types that are also node features), the default
partitions and the GPU memory of each type (from the catalog). Building one needs
``scontrol show node/partition -o``, the Slurm text parsers and the GPU catalog; a cache hit
needs none of them.

The cache lives in ``$XDG_CACHE_HOME/slurm-hase`` (or ``~/.cache/slurm-hase``), one small JSON
file per Slurm configuration (``SLURM_CONF``, its mtime and ``SLURM_CLUSTERS``), trusted for
:data:`CACHE_TTL_S` seconds, written atomically. It only shapes the user's own constraint and
is never read by the daemon; anything wrong with it (missing, corrupt, foreign, stale,
unwritable) is a miss, never an error.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from slurm_hase.files import replace_whole

if TYPE_CHECKING:
    from slurm_hase.slurm.types import Node, Partition

CACHE_TTL_S = 60.0
CACHE_VERSION = 1
CACHE_MAX_BYTES = 4 * 1024 * 1024
DEFAULT_SLURM_CONF = "/etc/slurm/slurm.conf"
NO_DEFAULT_NOTE = "default partition unknown; showing every GPU type"


class Group:
    """``count`` nodes that look alike to hsbatch."""

    __slots__ = ("partitions", "usable", "gpus", "featured", "count")

    def __init__(self, partitions: tuple[str, ...], usable: bool, gpus: dict[str, int],
                 featured: frozenset[str], count: int) -> None:
        self.partitions = partitions
        self.usable = usable
        self.gpus = gpus  # typed GPUs only, count > 0
        self.featured = featured  # the types in ``gpus`` that are also node features
        self.count = count


class Summary:
    """Node groups, default partitions and GPU memory per type."""

    __slots__ = ("defaults", "groups", "memory_gb")

    def __init__(self, defaults: tuple[str, ...], groups: list[Group],
                 memory_gb: dict[str, float | None]) -> None:
        self.defaults = defaults
        self.groups = groups
        self.memory_gb = memory_gb

    def types_for(self, wanted: Sequence[str]) -> tuple[dict[str, tuple[int, bool]], str | None]:
        """GPU type -> (GPU count, every node carries the type as a feature) over the usable
        nodes of ``wanted`` (the default partitions if empty; every node if none is default),
        or over all of them if none is usable; plus a note when the default is unknown."""
        names = set(wanted or self.defaults)
        note = None if names else NO_DEFAULT_NOTE
        groups = [g for g in self.groups if not names or names.intersection(g.partitions)]
        out: dict[str, tuple[int, bool]] = {}
        for g in [g for g in groups if g.usable] or groups:
            for t, n in g.gpus.items():
                total, featured = out.get(t, (0, True))
                out[t] = (total + n * g.count, featured and t in g.featured)
        return dict(sorted(out.items())), note

    def to_json(self) -> dict[str, object]:
        return {"defaults": list(self.defaults), "memory_gb": self.memory_gb,
                "groups": [[list(g.partitions), g.usable, g.gpus, sorted(g.featured), g.count]
                           for g in self.groups]}

    @classmethod
    def from_json(cls, obj: object) -> Summary:
        """The inverse of :meth:`to_json`; ValueError on any unexpected shape."""
        if not isinstance(obj, dict):
            raise ValueError("summary is not an object")
        memory = obj.get("memory_gb")
        if not isinstance(memory, dict) or not all(
            isinstance(k, str) and (v is None or type(v) in (int, float)) for k, v in memory.items()
        ):
            raise ValueError("bad memory_gb")
        groups = []
        for g in _list(obj.get("groups")):
            parts, usable, gpus, featured, count = _list(g, 5)
            if (type(usable) is not bool or type(count) is not int or not isinstance(gpus, dict)
                    or not all(isinstance(k, str) and type(v) is int for k, v in gpus.items())):
                raise ValueError("bad group")
            groups.append(Group(_strs(parts), usable, gpus, frozenset(_strs(featured)), count))
        return cls(_strs(obj.get("defaults")), groups,
                   {k: None if v is None else float(v) for k, v in memory.items()})


def _list(value: object, size: int | None = None) -> list[object]:
    if not isinstance(value, list) or (size is not None and len(value) != size):
        raise ValueError("bad list")
    return value


def _strs(value: object) -> tuple[str, ...]:
    items = _list(value)
    if not all(isinstance(s, str) for s in items):
        raise ValueError("bad names")
    return tuple(str(s) for s in items)


def summarize(nodes: Iterable[Node], partitions: Iterable[Partition],
              memory_of: Callable[[str], float | None]) -> Summary:
    """Group ``nodes`` and look up the memory of every GPU type among them."""
    counts: dict[tuple[tuple[str, ...], bool, tuple[tuple[str, int], ...], frozenset[str]], int] = {}
    for n in nodes:
        gpus = tuple(sorted((t, c) for t, c in n.gpus.items() if t and c > 0))
        featured = frozenset(t for t, _ in gpus if t in n.features)
        key = (tuple(sorted(set(n.partitions))), n.usable, gpus, featured)
        counts[key] = counts.get(key, 0) + 1
    groups = [Group(p, u, dict(g), f, c) for (p, u, g, f), c in counts.items()]
    types = sorted({t for g in groups for t in g.gpus})
    return Summary(tuple(p.name for p in partitions if p.default), groups,
                   {t: memory_of(t) for t in types})


def cache_dir(env: Mapping[str, str]) -> str | None:
    """``$XDG_CACHE_HOME/slurm-hase`` or ``~/.cache/slurm-hase``; None if neither is absolute."""
    base = env.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        home = env.get("HOME") or os.path.expanduser("~")
        base = os.path.join(home, ".cache")
    return os.path.join(base, "slurm-hase") if os.path.isabs(base) else None


def cache_key(env: Mapping[str, str]) -> list[object]:
    """What a cached summary is valid for: the Slurm configuration file (and its mtime)."""
    conf = env.get("SLURM_CONF", "")
    try:
        mtime: int | None = os.stat(conf or DEFAULT_SLURM_CONF).st_mtime_ns
    except OSError:
        mtime = None
    return [conf, mtime, env.get("SLURM_CLUSTERS", "")]


def cache_path(directory: str, key: Sequence[object]) -> str:
    import zlib

    tag = zlib.crc32(json.dumps([key[0], key[2]]).encode("utf-8", "surrogateescape"))
    return os.path.join(directory, f"hsbatch-cluster-{tag:08x}.json")


def load(directory: str, key: Sequence[object], now: float) -> Summary | None:
    """The cached summary for ``key`` if fresh and well-formed, else None (never raises)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        with os.fdopen(os.open(cache_path(directory, key), flags), "rb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
                return None  # a FIFO, device or another user's file: never read it
            data = fh.read(CACHE_MAX_BYTES + 1)
        if len(data) > CACHE_MAX_BYTES:
            return None
        doc = json.loads(data)
        written = doc["written"]
        if (doc["version"] != CACHE_VERSION or doc["key"] != list(key)
                or type(written) not in (int, float) or not 0 <= now - written < CACHE_TTL_S):
            return None
        return Summary.from_json(doc["summary"])
    except Exception:  # a cache problem is a miss
        return None


def store(directory: str, key: Sequence[object], summary: Summary, now: float) -> None:
    """Write the cache file atomically (tmp + rename); failures are ignored."""
    doc = {"version": CACHE_VERSION, "key": list(key), "written": now,
           "summary": summary.to_json()}
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        replace_whole(cache_path(directory, key), json.dumps(doc, separators=(",", ":")),
                      mode=0o600)
    except Exception:  # a read-only or full home must not fail the submission
        pass
