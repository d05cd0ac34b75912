"""Which Slurm and MariaDB releases wrote a cluster folder's saved state, and whether the
installed ones can read it (a folder kept across an OS upgrade, or copied from another host).

slurmctld's state files (state/ctld) start with the packed string "PROTOCOL_VERSION" and the
writer's protocol version (release number << 8). slurmctld reads the state of its own release
and of the two before it only, never a newer one ("Can not recover ... state, data version
incompatible"). MariaDB's data folder records the release that last upgraded it
(mysql_upgrade_info up to 10.x, mariadb_upgrade_info from 11); an older MariaDB cannot open it.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from pathlib import Path

# protocol version >> 8 -> Slurm release; one per release (slurm_protocol_common.h). 38 and 42
# are the values Debian 12's 22.05 and Debian 13's 24.11 write
# (tests/fixtures/slurm/local-*/node_state.head)
RELEASE_OF_PROTOCOL = {
    36: (20, 11), 37: (21, 8), 38: (22, 5), 39: (23, 2), 40: (23, 11), 41: (24, 5),
    42: (24, 11), 43: (25, 5), 44: (25, 11),
}
PROTOCOL_OF_RELEASE = {release: proto for proto, release in RELEASE_OF_PROTOCOL.items()}
STATE_FILES = ("node_state", "part_state", "job_state")  # any one tells the release
_MAGIC = b"PROTOCOL_VERSION\x00"
UPGRADE_INFO = ("mariadb_upgrade_info", "mysql_upgrade_info")  # MariaDB >= 11, before


def release_name(release: tuple[int, int]) -> str:
    """(22, 5) -> "22.05"."""
    return f"{release[0]}.{release[1]:02d}"


def saved_protocol(ctld_state: Path) -> int | None:
    """Protocol release number (version >> 8) of the first readable state file in slurmctld's
    StateSaveLocation; None when there is none (a fresh folder) or it has no version header."""
    for name in STATE_FILES:
        try:
            with (ctld_state / name).open("rb") as fh:
                head = fh.read(32)  # the header only: job_state can be megabytes
        except OSError:
            continue
        size = len(_MAGIC)
        if head[:4] != struct.pack(">I", size) or head[4:4 + size] != _MAGIC:
            continue
        if len(head) < 6 + size:
            continue
        version = int.from_bytes(head[4 + size:6 + size], "big")
        return version >> 8
    return None


def slurm_state_problem(saved: int, installed: tuple[int, int]) -> str | None:
    """Why the installed Slurm cannot read state saved at protocol release `saved`; None when
    it can (or when either release is one this table does not know: slurmctld then judges)."""
    current = PROTOCOL_OF_RELEASE.get(installed)
    written = RELEASE_OF_PROTOCOL.get(saved)
    if current is None or written is None or current - 2 <= saved <= current:
        return None
    if saved > current:
        why = "a newer release than this one"
    else:
        why = "more than two releases before this one"
    return (f"its Slurm state was saved by Slurm {release_name(written)}, {why} (Slurm "
            f"{release_name(installed)} reads the state of its own release and the two before it)")


def mariadb_release(text: str) -> tuple[int, int] | None:
    """(major, minor) of a MariaDB version string ("10.11.19-MariaDB", "mariadbd  Ver
    11.8.9-MariaDB-1 for debian-linux-gnu"); None when there is none."""
    match = re.search(r"(\d+)\.(\d+)\.\d+-MariaDB", text)
    return (int(match[1]), int(match[2])) if match else None


def saved_mariadb_release(datadir: Path) -> tuple[int, int] | None:
    """(major, minor) of the MariaDB that last upgraded `datadir`; None when there is no
    record of it (a fresh folder)."""
    for name in UPGRADE_INFO:
        try:
            return mariadb_release((datadir / name).read_text(errors="replace"))
        except OSError:
            continue
    return None


def mariadb_data_problem(saved: tuple[int, int], installed: tuple[int, int] | None) -> str | None:
    """Why the installed MariaDB cannot open a data folder `saved` wrote: a newer MariaDB
    wrote it; None when it can, or when the installed release is unknown."""
    if installed is None or saved <= installed:
        return None
    return (f"its MariaDB data was written by MariaDB {saved[0]}.{saved[1]}, newer than this "
            f"host's {installed[0]}.{installed[1]}, which cannot open it")


def saved_state_problem(root: Path, state: Path, slurm_release: Callable[[], tuple[int, int]],
                        mariadb_version: Callable[[], str]) -> str | None:
    """What keeps this host's Slurm and MariaDB from reading the state kept in `state` (a
    folder kept across an OS upgrade, or copied from another host: the daemons would only fail
    to become ready, the cause deep in their logs), as a message naming the way out; None
    when nothing does. The installed releases are asked for only when there is saved state."""
    problems = []
    saved = saved_protocol(state / "ctld")
    if saved is not None:
        problems.append(slurm_state_problem(saved, slurm_release()))
    written = saved_mariadb_release(state / "mysql")
    if written is not None:
        problems.append(mariadb_data_problem(written, mariadb_release(mariadb_version())))
    found = [p for p in problems if p is not None]
    if not found:
        return None
    return (f"the cluster folder {root} was made by other releases than this host's: "
            + "; ".join(found) + f". To start afresh, move it aside (mv {root} {root}.old) and "
            "run 'hase cluster up' again, or give another folder (--dir or HASE_CLUSTER_DIR)")
