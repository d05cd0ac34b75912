"""Request merging (#SBATCH < env < CLI), GPU request parsing, and the type-constraint choice."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hase.hsbatch import plan
from slurm_hase.hsbatch.cluster import summarize
from slurm_hase.hsbatch.request import (
    build_request,
    classify_gpus,
    classify_gres,
    parse_time_limit,
)
from slurm_hase.hsbatch.sbatch_opts import scan
from slurm_hase.hsbatch.script import parse_header
from slurm_hase.predict.descriptor import WorkloadDescriptor
from slurm_hase.slurm.types import Node, Partition


@pytest.mark.parametrize(
    ("value", "expected"),
    [("gpu:2", (True, False)), ("gpu:a100:1", (False, True)), ("gpu", (True, False)),
     ("gpu:a100", (False, True)), ("mps:50", (True, False)), ("gres:gpu:v100:2", (False, True)),
     ("craynetwork:1", (False, False)), ("gpu:0", (False, False)), ("none", (False, False)),
     ("gpu:a100:1(S:0),mps:25", (True, True))],
)
def test_classify_gres(value: str, expected: tuple[bool, bool]) -> None:
    assert classify_gres(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [("2", (True, False)), ("a100:2", (False, True)), ("a100:1,2", (True, True)), ("0", (False, False))],
)
def test_classify_gpus(value: str, expected: tuple[bool, bool]) -> None:
    assert classify_gpus(value) == expected


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("10", 600), ("10:30", 630), ("1:00:00", 3600), ("2-3", 2 * 86400 + 3 * 3600),
     ("1-0:10", 86400 + 600), ("1-0:0:5", 86405), ("UNLIMITED", None), ("soon", None), (None, None)],
)
def test_time_limits(text: str | None, seconds: int | None) -> None:
    assert parse_time_limit(text) == seconds


def test_precedence_script_env_cli() -> None:
    head = parse_header("#!/bin/sh\n#SBATCH -p debug -t 5\n#SBATCH --gres=gpu:1 # two\nhostname\n"
                        "#SBATCH --comment=late\n", "j")
    req = build_request(scan([]), {}, head.directives)
    assert req.partitions == ("debug",) and req.time_limit_s == 300 and req.gpu_untyped
    assert req.comment is None  # directives after the first command are ignored, as sbatch does
    req = build_request(scan([]), {"SBATCH_PARTITION": "gpu", "SBATCH_TIMELIMIT": "7"}, head.directives)
    assert req.partitions == ("gpu",) and req.time_limit_s == 420
    req = build_request(scan(["-p", "a,b", "--gpus=a100:1"]), {"SBATCH_PARTITION": "gpu"},
                        head.directives)
    assert req.partitions == ("a", "b") and req.gpu_typed


def test_hetjob_directive() -> None:
    assert parse_header("#!/bin/sh\n#SBATCH -N1\n#SBATCH hetjob\n#SBATCH -N2\n", "j").het


NODES = [Node("a", "IDLE", features=("a100",), partitions=("gpu",), gpus={"a100": 4}),
         Node("t", "IDLE", features=("t4",), partitions=("gpu", "dbg"), gpus={"t4": 4}),
         Node("c", "IDLE", partitions=("gpu",))]
MEM = {"a100": 80.0, "t4": 16.0}
PARTS = [Partition("gpu", default=True), Partition("dbg")]


def rows(desc: WorkloadDescriptor, nodes: list[Node] = NODES) -> list[plan.TypeRow]:
    types, note = summarize(nodes, PARTS, MEM.get).types_for(())
    assert note is None
    return plan.judge_types(types, desc, memory_of=MEM.get,
                            params_m=desc.params_m, time_limit_s=None, predictions=None)


def test_memory_lower_bound_picks_types() -> None:
    big = WorkloadDescriptor(gflops_per_iter=1e4, params_m=7000, precision="fp16")  # 28 GB
    assert plan.choose_constraint(rows(big)) == ("a100", None)
    small = WorkloadDescriptor(gflops_per_iter=10, params_m=100)
    assert plan.choose_constraint(rows(small)) == (None, None)  # every type fits
    infer = WorkloadDescriptor(gflops_per_iter=1e4, params_m=7000, precision="fp16", mode="infer")
    assert plan.choose_constraint(rows(infer)) == (None, None)  # 14 GB fits a t4
    huge = WorkloadDescriptor(gflops_per_iter=1e4, params_m=70000, precision="fp16")
    constraint, reason = plan.choose_constraint(rows(huge))
    assert constraint is None and reason is not None and "no GPU type" in reason
    spread = WorkloadDescriptor(gflops_per_iter=1e4, params_m=70000, precision="fp16", num_gpus=8)
    assert plan.choose_constraint(rows(spread)) == ("a100", None)


def test_no_features_no_constraint() -> None:
    bare = [Node("a", "IDLE", partitions=("gpu",), gpus={"a100": 4}),
            Node("t", "IDLE", partitions=("gpu",), gpus={"t4": 4})]
    big = WorkloadDescriptor(gflops_per_iter=1e4, params_m=7000, precision="fp16")
    constraint, reason = plan.choose_constraint(rows(big, bare))
    assert constraint is None and reason is not None and "features" in reason


def test_partition_types() -> None:
    summary = summarize(NODES, PARTS, MEM.get)
    assert summary.types_for(()) == ({"a100": (4, True), "t4": (4, True)}, None)
    assert summary.types_for(("dbg",)) == ({"t4": (4, True)}, None)
    assert summary.types_for(("nope",)) == ({}, None)
    types, note = summarize(NODES, [Partition("gpu")], MEM.get).types_for(())
    assert list(types) == ["a100", "t4"] and note is not None and "default partition" in note


def test_usable_nodes_first_and_counts_summed() -> None:
    nodes = [Node(f"a{i}", "IDLE", features=("a100",), partitions=("gpu",), gpus={"a100": 4})
             for i in range(3)]
    nodes += [Node("v1", "DOWN", features=("v100",), partitions=("gpu",), gpus={"v100": 2}),
              Node("v2", "IDLE", state_flags=("DRAIN",), partitions=("dbg",), gpus={"v100": 2}),
              Node("a9", "IDLE", partitions=("gpu",), gpus={"a100": 1, "": 2})]
    summary = summarize(nodes, PARTS, MEM.get)
    assert len(summary.groups) == 4  # the three a100 nodes are one group
    assert summary.types_for(()) == ({"a100": (13, False)}, None)  # a9 lacks the feature
    assert summary.types_for(("dbg",)) == ({"v100": (2, False)}, None)  # none usable: all of dbg
    assert summary.memory_gb == {"a100": 80.0, "v100": None}


def test_why_nothing_fits_names_memory_and_time() -> None:
    huge = WorkloadDescriptor(gflops_per_iter=1e4, params_m=70000, precision="fp16")  # 280 GB
    need = plan.min_memory_gb(huge, huge.params_m)
    msg = plan.why_nothing_fits(rows(huge), need, None)
    assert msg is not None and "280.0 GB per GPU" in msg and "largest 80 GB" in msg
    big = WorkloadDescriptor(gflops_per_iter=1e4, params_m=7000, precision="fp16")
    assert plan.why_nothing_fits(rows(big), plan.min_memory_gb(big, big.params_m), None) is None
    slow = [plan.TypeRow("a100", 4, 40.0, runtime_p50_s=7200.0, finishes=False, fits_memory=True),
            plan.TypeRow("t4", 4, 16.0, runtime_p50_s=36000.0, finishes=False, fits_memory=True)]
    msg = plan.why_nothing_fits(slow, 1.0, 3600)
    assert msg is not None and "time limit of 3600 s" in msg and "fastest: a100, 7200 s" in msg
    assert plan.why_nothing_fits([], None, 3600) is None


@pytest.mark.parametrize("odd", ["\u2028", "\x1c", "\x0b", "\x0c", "\x85"])
def test_header_lines_end_at_newlines_only(odd: str) -> None:
    """sbatch reads lines up to "\\n": a comment holding U+2028 or \\x1c does not end the
    header early, so the directives after it count (str.splitlines would break there)."""
    text = (f"#!/bin/bash\n# note {odd} pasted\n#SBATCH -t 60 --gpus=1\n#SBATCH --constraint=t4\n"
            "#SBATCH --comment=mine\n#HASE model=resnet50\nsrun true\n")
    head = parse_header(text, "job.sh")
    assert head.directives == [["-t", "60", "--gpus=1"], ["--constraint=t4"], ["--comment=mine"]]
    assert [h.key for h in head.hase] == ["model"] and not head.late_hase


def test_a_script_on_a_pipe_is_read_once_and_a_file_is_not(tmp_path: Path) -> None:
    """read_once takes the whole of what only one reader can have (a pipe), never a file."""
    import os

    from slurm_hase.hsbatch.script import keep_copy, read_once

    r, w = os.pipe()
    os.write(w, b"#!/bin/bash\n#SBATCH -J x\n\xff\n")
    os.close(w)
    try:
        data = read_once(f"/dev/fd/{r}")
    finally:
        os.close(r)
    assert data == b"#!/bin/bash\n#SBATCH -J x\n\xff\n"
    copy = keep_copy(data)
    try:
        assert Path(copy).read_bytes() == data and (os.stat(copy).st_mode & 0o777) == 0o600
    finally:
        os.unlink(copy)
    (tmp_path / "job.sh").write_text("#!/bin/bash\n")
    assert read_once(str(tmp_path / "job.sh")) is None and read_once(str(tmp_path)) is None
    assert read_once(str(tmp_path / "missing.sh")) is None
