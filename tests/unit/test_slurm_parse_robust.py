"""Truncated, non-JSON and wrong-shape output raises SlurmParseError, never a raw exception."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from slurm_hase.errors import SlurmParseError
from slurm_hase.slurm.parse_json import parse_squeue_json
from slurm_hase.slurm.parse_json_nodes import parse_sinfo_json
from slurm_hase.slurm.parse_json_sacct import parse_sacct_json
from slurm_hase.slurm.parse_sacct_text import parse_sacct_parsable
from slurm_hase.slurm.parse_text import parse_scontrol_jobs, parse_scontrol_nodes

JSON_PARSERS: dict[str, Callable[[str], list[Any]]] = {
    "squeue.json": parse_squeue_json,
    "sinfo.json": parse_sinfo_json,
    "sacct.json": parse_sacct_json,
}
TEXT_PARSERS: dict[str, Callable[[str], list[Any]]] = {
    "scontrol-show-job.txt": parse_scontrol_jobs,
    "scontrol-show-node.txt": parse_scontrol_nodes,
    "sacct-parsable.txt": parse_sacct_parsable,
}
HEADER_LINES = {"scontrol-show-job.txt": 0, "scontrol-show-node.txt": 0, "sacct-parsable.txt": 1}
CUTS = (0.02, 0.1, 0.33, 0.5, 0.71, 0.9, 0.999)
VERSIONS = ("22.05", "24.11")


def cap(fixtures_dir: Path, version: str, name: str) -> str:
    return (fixtures_dir / "slurm" / version / name).read_text()


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", sorted(JSON_PARSERS))
@pytest.mark.parametrize("cut", CUTS)
def test_truncated_json_raises(fixtures_dir: Path, version: str, name: str, cut: float) -> None:
    full = cap(fixtures_dir, version, name)
    with pytest.raises(SlurmParseError):
        JSON_PARSERS[name](full[: int(len(full) * cut)])


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", sorted(TEXT_PARSERS))
@pytest.mark.parametrize("cut", CUTS)
def test_truncated_text_raises_or_yields_complete_prefix(
    fixtures_dir: Path, version: str, name: str, cut: float
) -> None:
    """A cut inside a record either raises or loses only that last record, never more."""
    full = cap(fixtures_dir, version, name)
    parse = TEXT_PARSERS[name]
    whole = parse(full)
    header = HEADER_LINES[name]
    assert len(whole) == full.count("\n") - header > 1  # one record a line in these captures
    text = full[: int(len(full) * cut)]
    done = max(text.count("\n") - header, 0)  # records whose line (and newline) survived
    assert done < len(whole)
    try:
        part = parse(text)
    except SlurmParseError:
        pass
    else:
        assert part == whole[:done]  # the cut record is dropped, never returned half-parsed
    # cut back to the last line end: exactly the complete records, no error
    assert parse(text[: text.rfind("\n") + 1]) == whole[:done]


@pytest.mark.parametrize("name", sorted(JSON_PARSERS))
@pytest.mark.parametrize(
    "junk",
    ["", "squeue: error: Unable to contact slurm controller", "[]", "null", '{"jobs": 3}',
     '{"nodes": [1, 2]}', "{" * 5000],
)
def test_non_json_or_wrong_top_level_raises(name: str, junk: str) -> None:
    with pytest.raises(SlurmParseError):
        JSON_PARSERS[name](junk)


def test_slurm_reported_errors_raise(fixtures_dir: Path) -> None:
    doc = json.loads(cap(fixtures_dir, "24.11", "squeue.json"))
    doc["errors"] = [{"description": "Unable to contact slurm controller", "error_number": 1}]
    with pytest.raises(SlurmParseError, match="Slurm reported errors"):
        parse_squeue_json(json.dumps(doc))


MUTATIONS: list[tuple[str, str, Callable[[dict[str, Any]], None]]] = [
    ("squeue.json", "jobs", lambda r: r.pop("job_state")),
    ("squeue.json", "jobs", lambda r: r.update(job_state=7)),
    ("squeue.json", "jobs", lambda r: r.update(priority="high")),
    ("squeue.json", "jobs", lambda r: r.update(tres_per_node=["gres/gpu:1"])),
    ("squeue.json", "jobs", lambda r: r.update(tres_per_job="gres/gpu:a100:many")),
    ("squeue.json", "jobs", lambda r: r.update(submit_time={"set": True, "number": "x"})),
    ("sacct.json", "jobs", lambda r: r.pop("time")),
    ("sacct.json", "jobs", lambda r: r.update(tres={"allocated": [{"count": 1}]})),
    ("sacct.json", "jobs", lambda r: r.update(state="COMPLETED")),
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("name", "key", "mutate"), MUTATIONS)
def test_wrong_shape_record_raises(
    fixtures_dir: Path, version: str, name: str, key: str,
    mutate: Callable[[dict[str, Any]], None],
) -> None:
    doc = json.loads(cap(fixtures_dir, version, name))
    bad = copy.deepcopy(doc)
    mutate(bad[key][0])
    with pytest.raises(SlurmParseError):
        JSON_PARSERS[name](json.dumps(bad))


@pytest.mark.parametrize("version", VERSIONS)
def test_wrong_shape_sinfo_raises(fixtures_dir: Path, version: str) -> None:
    doc = json.loads(cap(fixtures_dir, version, "sinfo.json"))
    key = "sinfo" if "sinfo" in doc else "nodes"
    rec = doc[key][0]
    if key == "sinfo":
        rec["gres"] = "gpu:a100:4"  # a string where 24.11 has an object
    else:
        rec["gres"] = {"total": "gpu:a100:4"}  # an object where 22.05 has a string
    with pytest.raises(SlurmParseError):
        parse_sinfo_json(json.dumps(doc))


def test_text_garbage_raises() -> None:
    with pytest.raises(SlurmParseError):
        parse_scontrol_jobs("slurm_load_jobs error: Unable to contact slurm controller\n")
    with pytest.raises(SlurmParseError):
        parse_scontrol_nodes("NodeName=x State=IDLE\n")  # misses Gres, CPUs, AllocTRES
    with pytest.raises(SlurmParseError):
        parse_sacct_parsable("this is not sacct output\n1|2\n")


@pytest.mark.parametrize("odd", ["\x1c", "\x1d", "\x1e", "\x0b", "\x0c", "\x85", "\u2028"])
def test_a_job_name_with_a_character_splitlines_breaks_at_stays_one_record(
        fixtures_dir: Path, odd: str) -> None:
    """Slurm ends records with "\\n" only: a job name holding \\x1c, U+2028 and the like is
    part of its record, not the start of a new one (real sacct output, one name edited)."""
    from slurm_hase.slurm import commands

    raw = (fixtures_dir / "slurm" / "local-22.05" / "sacct-requeued.txt").read_text()
    header, first, *rest = raw.split("\n")
    fields = first.split(commands.SACCT_DELIMITER)
    name_at = header.split(commands.SACCT_DELIMITER).index("JobName")
    fields[name_at] = f"a{odd}b"
    edited = "\n".join([header, commands.SACCT_DELIMITER.join(fields), *rest])
    recs = parse_sacct_parsable(edited, delimiter=commands.SACCT_DELIMITER)
    assert len(recs) == len(parse_sacct_parsable(raw, delimiter=commands.SACCT_DELIMITER))
    assert recs[0].name == f"a{odd}b"
