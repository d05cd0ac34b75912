"""hsbatch reads a job as sbatch 22.05.8 reads it (each rule checked against the real
`sbatch -v`): SBATCH_IGNORE_PBS, the script file with -D and PATH, options it does not know,
blank lines, #SBATCH words across lines, and the name of a piped script's copy."""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from slurm_hase.hsbatch.request import env_flag_set, het_components
from slurm_hase.hsbatch.script import found_script, parse_header
from slurm_hase.slurm.runner import CommandResult
from tests.unit.test_hsbatch_core import FakeRunner, hsbatch, script

GPU_JOB = "#SBATCH --gres=gpu:1 -t 10\n#HASE model=resnet50 iterations=2000\n"


def added(argv: Sequence[str]) -> list[str]:
    """The --comment/--constraint words hsbatch put in."""
    return [a for a in argv if a.startswith(("--comment=", "--constraint="))]


# --- 4. SBATCH_IGNORE_PBS, read as sbatch reads a flag from a variable ------------------------

@pytest.mark.parametrize(("value", "ignores"), [
    ("", True), ("yes", True), ("YES", True), ("1", True), ("-1", True), ("+3", True),
    (" 2", True), ("\t7", True), ("9" * 30, True),
    ("0", False), ("no", False), ("true", False), ("off", False), ("2 ", False),
    ("00", False), ("-0", False), ("0x1", False), ("1.0", False), ("Yes ", False),
    ("y", False), ("  ", False), ("+", False), ("\u0661", False)])
def test_ignore_pbs_variable_follows_sbatch(value: str, ignores: bool) -> None:
    """Each value as `SBATCH_IGNORE_PBS=value sbatch -v` on a #PBS script showed it: the
    #PBS lines are ignored for an empty value, `yes` and a non-zero number only."""
    assert env_flag_set(value) is ignores
    assert env_flag_set(None) is False


@pytest.mark.parametrize(("value", "constrained"), [("0", False), ("no", False), ("yes", True),
                                                    ("", True)])
def test_pbs_script_gets_a_constraint_only_when_sbatch_ignores_its_pbs_lines(
        tmp_path: Path, value: str, constrained: bool) -> None:
    """`SBATCH_IGNORE_PBS=0` used to count as ignoring: hsbatch added a constraint, while
    sbatch obeyed the #PBS lines hsbatch cannot read."""
    s = script(tmp_path, "#PBS -q debug\n" + GPU_JOB)
    r = hsbatch([s], env={"SBATCH_IGNORE_PBS": value, "HASE_SPEED_SLACK": "0"})
    assert any(a.startswith("--constraint=") for a in r.calls[0][0]) is constrained


# --- 5. the script file sbatch reads: the -D directory, then PATH, then as given --------------

def put(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/bash\n" + body + "srun true\n")
    return path


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    put(tmp_path / "run.sh", "#SBATCH -C in_cwd\n")
    put(tmp_path / "d1" / "run.sh", "#SBATCH -C in_d1\n")
    put(tmp_path / "only.sh", "#SBATCH -C in_cwd_only\n")
    put(tmp_path / "both.sh", "#SBATCH -C both_cwd\n")
    put(tmp_path / "pdir" / "both.sh", "#SBATCH -C both_path\n")
    put(tmp_path / "pdir" / "run.sh", "#SBATCH -C path_run\n")
    put(tmp_path / "pdir" / "sub" / "x.sh", "#SBATCH -C path_sub\n")
    put(tmp_path / "d1" / "pd" / "rel.sh", "#SBATCH -C d1_pd\n")
    put(tmp_path / "pd" / "rel.sh", "#SBATCH -C cwd_pd\n")
    put(tmp_path / "d1" / ".h.sh", "#SBATCH -C d1_hidden\n")
    put(tmp_path / ".h.sh", "#SBATCH -C cwd_hidden\n")
    (tmp_path / "d3" / "run.sh").mkdir(parents=True)
    return tmp_path


@pytest.mark.parametrize(("chdir", "path", "name", "read"), [
    # each row as `PATH=... sbatch -v [-D chdir] name` showed it (the constraint it printed);
    # {t}: the test's folder, the current directory
    ("d1", "", "run.sh", "in_d1"), ("d1", "", "only.sh", "in_cwd_only"),
    ("d2", "", "run.sh", "in_cwd"), ("d1", "{t}/pdir", "run.sh", "in_d1"),
    ("d1", "{t}/pdir", "both.sh", "both_path"), (None, "{t}/pdir", "both.sh", "both_cwd"),
    (None, "{t}/pdir", "sub/x.sh", "path_sub"), ("d1", "./pd", "rel.sh", "d1_pd"),
    ("d1", "pd", "rel.sh", "cwd_pd"), ("d1", "", ".h.sh", "cwd_hidden"),
    ("d1", "", "./run.sh", "in_cwd"), ("d3", "", "run.sh", "in_cwd"),
    ("d1", "::{t}/pdir:", "both.sh", "both_path")])
def test_script_is_found_where_sbatch_finds_it(tree: Path, chdir: str | None, path: str,
                                               name: str, read: str) -> None:
    """sbatch looks for a relative script name in the -D directory (else the current one),
    then along PATH, and reads it as given when none has it."""
    found = found_script(name, chdir, path.format(t=tree) or None)
    header = parse_header(Path(found or name).read_text(), name)
    assert header.directives == [["-C", read]]


def test_d_directory_script_with_its_own_comment_keeps_it(tree: Path) -> None:
    """`hsbatch -D d1 run.sh` read ./run.sh where sbatch reads d1/run.sh, which sets its own
    --comment and -C: hsbatch added a comment and a constraint over them."""
    put(tree / "d1" / "run.sh", "#SBATCH --comment=exp1 -C v100\n#HASE model=resnet50\n")
    put(tree / "run.sh", "#SBATCH --gres=gpu:1\n")
    r = hsbatch(["-D", "d1", "--gpus=1", "-t", "10", "run.sh"])
    assert r.calls[0][0] == ["sbatch", "-D", "d1", "--gpus=1", "-t", "10", "run.sh"]
    assert "--comment is already set" in r.err


def test_script_found_along_path_is_the_one_read(tree: Path) -> None:
    """`sbatch job.sh` with job.sh only in a PATH directory reads that file; hsbatch read
    nothing and added a comment over the file's own."""
    put(tree / "pdir" / "job.sh", "#SBATCH --comment=exp1\n#SBATCH --gres=gpu:1\n")
    r = hsbatch(["--hase-model=resnet50", "job.sh"], env={"PATH": str(tree / "pdir")})
    assert r.calls[0][0] == ["sbatch", "job.sh"]


# --- 6. an option hsbatch does not know, before the script ------------------------------------

@pytest.mark.parametrize("unknown", [["--container-image", "nvcr.io/x:1"],
                                     ["--container-image=nvcr.io/x:1"], ["--bogus"]])
def test_unknown_option_before_the_script_passes_the_line_through(
        tmp_path: Path, unknown: list[str]) -> None:
    """`--container-image IMG job.sh` (a SPANK plugin's option): hsbatch took IMG for the
    script, never read job.sh and overrode its #SBATCH --comment and -C. It now adds nothing,
    reads no stdin and warns once, naming the option."""
    s = script(tmp_path, "#SBATCH --comment=mine -C v100\n" + GPU_JOB)
    r = hsbatch(["--hase-model=resnet50", "--gpus=1", *unknown, s], stdin="#!/bin/sh\n")
    assert r.calls == [(["sbatch", "--gpus=1", *unknown, s], None)]
    name = unknown[0].split("=")[0]
    assert r.err.count("hsbatch: warning:") == 1 and f"does not know {name};" in r.err


def test_unknown_option_with_wrap_passes_the_line_through() -> None:
    r = hsbatch(["--hase-model=resnet50", "--gpus=1", "--container-image", "img", "--wrap=true"])
    assert r.calls == [(["sbatch", "--gpus=1", "--container-image", "img", "--wrap=true"], None)]


def test_unknown_option_before_a_piped_script_still_hands_sbatch_a_copy() -> None:
    seen: list[str] = []

    class Reading(FakeRunner):
        def run(self, argv: Sequence[str], **kw: object) -> CommandResult:  # type: ignore[override]
            seen.append(Path(argv[-1]).read_text())
            return super().run(argv, **kw)  # type: ignore[arg-type]

    r_fd, w_fd = os.pipe()
    os.write(w_fd, b"#!/bin/sh\n#HASE model=resnet50\nhostname\n")
    os.close(w_fd)
    try:
        res = hsbatch(["--bogus", f"/dev/fd/{r_fd}"], runner=Reading())
    finally:
        os.close(r_fd)
    assert seen == ["#!/bin/sh\n#HASE model=resnet50\nhostname\n"]
    assert res.calls[0][0][:2] == ["sbatch", "--bogus"] and not added(res.calls[0][0])


# --- 7. blank lines are C's blanks only -----------------------------------------------------

@pytest.mark.parametrize(("line", "blank"), [
    ("\u00a0", False), ("\x1c", False), ("\x1f", False), ("\x85", False), ("\u2003", False),
    ("\x0b", True), ("\x0c", True), (" \t ", True), (" \r ", True), ("", True)])
def test_a_line_sbatch_takes_for_a_command_ends_the_header(line: str, blank: bool) -> None:
    """A line of only U+00A0 or \\x1c is a command to sbatch (it stops reading #SBATCH
    lines); str.strip() took it for blank, so hsbatch read the directives after it."""
    head = parse_header(f"#!/bin/bash\n#SBATCH -t 10\n{line}\n#SBATCH -C after\n"
                        "#HASE model=resnet50\nhostname\n", "job.sh")
    assert head.directives == ([["-t", "10"], ["-C", "after"]] if blank else [["-t", "10"]])
    assert bool(head.hase) is blank and bool(head.late_hase) is not blank


def test_gpu_request_after_a_nbsp_line_is_not_the_jobs(tmp_path: Path) -> None:
    s = script(tmp_path, "#SBATCH -t 10\n#HASE model=resnet50 iterations=2000\n\u00a0\n"
                         "#SBATCH --gres=gpu:1\n")
    r = hsbatch([s])
    assert not any(a.startswith("--constraint=") for a in r.calls[0][0])


# --- 8. #SBATCH words of one het component are one argument list ------------------------------

def test_an_option_value_on_the_next_sbatch_line_counts(tmp_path: Path) -> None:
    """`#SBATCH ... --comment` then `#SBATCH nightly-42 -C v100`: sbatch gives the comment
    nightly-42 and the constraint v100; hsbatch scanned line by line, missed -C v100 and
    added --constraint=a100|v100."""
    s = script(tmp_path, "#SBATCH --gres=gpu:1 -t 10 --comment\n#SBATCH nightly-42 -C v100\n"
                         "#HASE model=resnet50 iterations=2000\n")
    r = hsbatch([s])
    assert r.calls[0][0] == ["sbatch", s] and "--comment is already set" in r.err


def test_het_components_split_at_hetjob_lines() -> None:
    lines = [["-t", "10", "--comment"], ["hetjob", "-C", "v100"], ["-p", "x"], ["packjob"]]
    assert het_components(lines) == [["-t", "10", "--comment"], ["-C", "v100", "-p", "x"], []]
    assert het_components([]) == [[]]


# --- 9. a piped script's copy keeps the script's name -----------------------------------------

def test_fifo_script_copy_keeps_its_name_and_goes_away(tmp_path: Path) -> None:
    """sbatch names the job after the script file: the copy used to be /tmp/hsbatch-XXXX.sh,
    changing the job name (%x in output paths, --dependency=singleton). It is now the same
    name in a private directory, both removed once sbatch returns."""
    fifo = tmp_path / "nightly.sh"
    os.mkfifo(fifo)
    body = b"#!/bin/sh\n#SBATCH --gres=gpu:1\nhostname\n"
    seen: list[tuple[str, bytes, int, int]] = []

    def write() -> None:
        with open(fifo, "wb") as fh:
            fh.write(body)

    class Reading(FakeRunner):
        def run(self, argv: Sequence[str], *, stdin: str | None = None,
                env: Mapping[str, str] | None = None, timeout_s: float | None = 60.0,
                cwd: str | None = None) -> CommandResult:
            copy = Path(argv[-1])
            seen.append((copy.name, copy.read_bytes(), stat.S_IMODE(copy.stat().st_mode),
                         stat.S_IMODE(copy.parent.stat().st_mode)))
            return super().run(argv, stdin=stdin)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        r = hsbatch([str(fifo)], runner=Reading())
    finally:
        writer.join(timeout=10)
    assert seen == [("nightly.sh", body, 0o600, 0o700)]
    copy = Path(r.calls[0][0][-1])
    assert copy != fifo and not copy.exists() and not copy.parent.exists()


# --- SBATCH_REQUEUE / SBATCH_NO_REQUEUE: the flag rule, as `sbatch -v` 22.05 shows it ----------

@pytest.mark.parametrize(("env", "choice"), [
    ({"SBATCH_REQUEUE": ""}, True),
    ({"SBATCH_REQUEUE": "yes"}, True),
    ({"SBATCH_REQUEUE": "2"}, True),
    ({"SBATCH_REQUEUE": "0"}, None),
    ({"SBATCH_REQUEUE": "no"}, None),
    ({"SBATCH_REQUEUE": "true"}, None),
    ({"SBATCH_NO_REQUEUE": ""}, False),
    ({"SBATCH_NO_REQUEUE": "0"}, None),
    ({"SBATCH_REQUEUE": "", "SBATCH_NO_REQUEUE": ""}, True),   # SBATCH_REQUEUE read last
    ({"SBATCH_REQUEUE": "0", "SBATCH_NO_REQUEUE": ""}, None),  # ... and its reset unsets it
    ({"SBATCH_REQUEUE": "", "SBATCH_NO_REQUEUE": "0"}, True),
])
def test_requeue_variables_follow_sbatchs_flag_rule(env: dict[str, str], choice: bool | None
                                                    ) -> None:
    from slurm_hase.hsbatch.request import requeue_choice
    from slurm_hase.hsbatch.sbatch_opts import scan

    assert requeue_choice(scan([]), env, scan([])) is choice
