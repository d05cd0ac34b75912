"""Text parsers: scontrol -o records, partitions, sacctmgr shares, versions, helpers."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from slurm_hase.errors import SlurmParseError
from slurm_hase.slurm.parse_sacct_text import parse_sacct_parsable
from slurm_hase.slurm.parse_shares import parse_sacctmgr_shares
from slurm_hase.slurm.parse_text import (
    expand_hostlist,
    parse_duration,
    parse_kv_line,
    parse_scontrol_jobs,
    parse_scontrol_partitions,
    parse_utc_time,
    parse_version,
)
from tests.conftest import slurm_capture

pytestmark = pytest.mark.usefixtures("utc")


def cap(fixtures_dir: Path, version: str, name: str) -> str:
    return slurm_capture(fixtures_dir, version, name)


def test_versions(fixtures_dir: Path) -> None:
    old = parse_version(cap(fixtures_dir, "22.05", "version.txt"))
    new = parse_version(cap(fixtures_dir, "24.11", "version.txt"))
    assert (old.tuple, old.text, new.tuple, new.micro) == ((22, 5), "22.05.8", (24, 11), 5)
    with pytest.raises(SlurmParseError):
        parse_version("sinfo: fatal: Could not establish a configuration source")


def test_kv_line_keeps_spaces_inside_values(fixtures_dir: Path) -> None:
    line = next(ln for ln in cap(fixtures_dir, "22.05", "scontrol-show-node.txt").splitlines()
                if ln.startswith("NodeName=a100-1"))
    rec = parse_kv_line(line)
    assert rec["OS"] == "Linux 6.18.44-fc-v782 #1 SMP PREEMPT_DYNAMIC @0"
    assert rec["AllocTRES"] == "cpu=2,gres/gpu=1,gres/gpu:a100=1,gres/mps=50"
    assert rec["CoresPerSocket"] == "1" and rec["CPUAlloc"] == "2"
    job = parse_kv_line('JobId=5 Comment={"a": 1, "b": "x y"}  StdErr=/dev/null Power=')
    assert job == {"JobId": "5", "Comment": '{"a": 1, "b": "x y"}', "StdErr": "/dev/null",
                   "Power": ""}


def test_scontrol_job_array_and_times(fixtures_dir: Path) -> None:
    jobs = {j.name: j for j in parse_scontrol_jobs(cap(fixtures_dir, "22.05",
                                                       "scontrol-show-job.txt"))}
    assert jobs["arr"].array_job_id == "153" and jobs["arr"].array_task_id == "1-3"
    assert jobs["done-t4"].submit_time == parse_utc_time("2026-11-29T22:41:13") == 1795992073
    assert jobs["held"].start_time is None and jobs["done-t4"].end_time == 1795992076


def test_text_times_are_utc_whatever_the_timezone(in_zone: Callable[[str], None]) -> None:
    """Slurm prints them in UTC (the backend runs it with TZ=UTC), so hase's own zone is moot."""
    in_zone("Europe/Berlin")
    assert time.localtime(1795992073).tm_hour == 23  # the zone did change
    assert parse_utc_time("2026-11-29T22:41:13") == 1795992073
    assert parse_utc_time("Unknown") is None and parse_utc_time("None") is None
    with pytest.raises(SlurmParseError):
        parse_utc_time("yesterday")


@pytest.mark.parametrize(("text", "secs"), [("UNLIMITED", None), ("00:00:01", 1),
                                            ("1-00:00:00", 86400), ("30:00", 1800), ("5", 300),
                                            ("2-03:04:05", 2 * 86400 + 3 * 3600 + 245)])
def test_duration(text: str, secs: int | None) -> None:
    assert parse_duration(text) == secs


@pytest.mark.parametrize(("text", "secs"), [("1-02", 86400 + 2 * 3600),
                                            ("1-02:03", 86400 + 2 * 3600 + 3 * 60),
                                            ("0-05", 5 * 3600)])
def test_duration_days_then_hours(text: str, secs: int) -> None:
    """sbatch(1) --time: "days-hours" and "days-hours:minutes" (after days come hours, not the
    minutes of "MM" or "MM:SS")."""
    assert parse_duration(text) == secs


def test_duration_rejects_garbage() -> None:
    with pytest.raises(SlurmParseError):
        parse_duration("1:2:3:4")
    with pytest.raises(SlurmParseError):
        parse_duration("ten")
    with pytest.raises(SlurmParseError):
        parse_duration("1-02:03:04:05")


def test_hostlist() -> None:
    assert expand_hostlist("a100-[1-2],t4-[1-2],v100-[1-2]") == [
        "a100-1", "a100-2", "t4-1", "t4-2", "v100-1", "v100-2"]
    assert expand_hostlist("n[08-10,12]") == ["n08", "n09", "n10", "n12"]
    assert expand_hostlist("r[1-2]n[1-2]") == ["r1n1", "r1n2", "r2n1", "r2n2"]
    assert expand_hostlist("(null)") == [] and expand_hostlist("t4-1") == ["t4-1"]
    with pytest.raises(SlurmParseError):
        expand_hostlist("n[1-2")
    with pytest.raises(SlurmParseError):
        expand_hostlist("n[a-b]")


def test_hostlist_too_large_is_refused_before_expanding() -> None:
    assert len(expand_hostlist("n[1-1000][1-1000]")) == 1_000_000
    for expr in ("n[1-99999999999]", "n[1-1000][1-1000][1-1000]", "a[1-600000],b[1-600000]"):
        with pytest.raises(SlurmParseError, match="more than 1,000,000 hosts"):
            expand_hostlist(expr)


@pytest.mark.parametrize("local", ["local-22.05", "local-24.11"])
def test_partitions_from_local_cluster(fixtures_dir: Path, local: str) -> None:
    parts = parse_scontrol_partitions(cap(fixtures_dir, local, "scontrol-show-partition.txt"))
    assert [(p.name, p.default, p.state) for p in parts] == [
        ("gpu", True, "UP"), ("debug", False, "UP")]
    assert parts[0].nodes == ("a100-1", "a100-2", "t4-1", "t4-2", "v100-1", "v100-2")
    assert parts[1].nodes == ("t4-1", "t4-2")


@pytest.mark.parametrize("local", ["local-22.05", "local-24.11"])
def test_sacctmgr_shares_from_local_cluster(fixtures_dir: Path, local: str) -> None:
    raw = cap(fixtures_dir, local, "sacctmgr-shares.txt")
    assert parse_sacctmgr_shares(raw) == {"root": 1.0, "teama": 60.0, "teamb": 40.0}
    with pytest.raises(SlurmParseError, match="mid-record"):  # cut output: never teama=6
        parse_sacctmgr_shares(raw[: raw.index("teama|root||60") + len("teama|root||6")])
    with pytest.raises(SlurmParseError, match="account|parent|user|share"):
        parse_sacctmgr_shares("teama||60\n")  # the format before the tree was asked for
    with pytest.raises(SlurmParseError):
        parse_sacctmgr_shares("teama|root||lots\n")


@pytest.mark.parametrize("local", ["local-22.05", "local-24.11"])
def test_sacctmgr_shares_of_an_account_tree(fixtures_dir: Path, local: str) -> None:
    """Shares count against siblings only (capture-local.sh's tree): root's children are the
    user root (1), physics (1), teama (60) and teamb (40); physics' are its user root (2),
    physa (3) and physb (share "parent"). physa holds 1 x 3/5 of the tree in root's units,
    physics' own users 1 x 2/5, root's own user its 1; physb is left out."""
    raw = cap(fixtures_dir, local, "sacctmgr-shares-tree.txt")
    assert parse_sacctmgr_shares(raw) == pytest.approx(
        {"root": 1.0, "physics": 0.4, "physa": 0.6, "teama": 60.0, "teamb": 40.0})
    # an account whose parent is not in the tree is not reachable from root: left out
    assert "lost" not in parse_sacctmgr_shares(raw + "lost|nowhere||5\n")


def test_sacct_text_with_unit_separator(fixtures_dir: Path) -> None:
    """The same capture re-delimited with \\x1f (what the backend asks for) parses the same."""
    raw = cap(fixtures_dir, "24.11", "sacct-parsable.txt")
    header, *rows = raw.splitlines()
    n = len(header.split("|"))
    fixed = [header.replace("|", "\x1f")]
    for row in rows:
        f = row.split("|")
        at = header.split("|").index("Constraints")
        extra = len(f) - n
        f = f[:at] + ["|".join(f[at:at + extra + 1])] + f[at + extra + 1:]
        fixed.append("\x1f".join(f))
    assert parse_sacct_parsable("\n".join(fixed) + "\n", delimiter="\x1f") == \
        parse_sacct_parsable(raw)
    assert parse_sacct_parsable("") == []


def test_node_reads_active_features_and_untyped_alloc_tres(fixtures_dir: Path) -> None:
    """The captured a100-1 line, edited as other sites print it: node features that are not
    all active (a rebootable node: Active wins), and accounting that tracks only gres/gpu
    (AccountingStorageTRES without gres/gpu:a100: the node's one type takes the count)."""
    from slurm_hase.slurm.parse_text import parse_scontrol_nodes

    line = (fixtures_dir / "slurm" / "22.05" / "scontrol-show-node.txt").read_text().splitlines()[0]
    assert line.startswith("NodeName=a100-1 ")
    edited = (line.replace("ActiveFeatures=a100,ampere", "ActiveFeatures=a100")
                  .replace("AllocTRES=cpu=2,gres/gpu=1,gres/gpu:a100=1,gres/mps=50",
                           "AllocTRES=cpu=2,gres/gpu=3"))
    [node] = parse_scontrol_nodes(edited + "\n")
    assert node.features == ("a100",)  # AvailableFeatures also has ampere
    assert node.gpus_alloc == {"a100": 3}
    [as_captured] = parse_scontrol_nodes(line + "\n")
    assert as_captured.features == ("a100", "ampere") and as_captured.gpus_alloc == {"a100": 1}
