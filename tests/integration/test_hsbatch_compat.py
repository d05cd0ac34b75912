"""Real sbatch and hsbatch side by side on the local cluster: same stdout, stderr and exit code
(job ids, start times and node names aside) over many invocation shapes; then what hsbatch adds.

Jobs are submitted held (or --test-only) and cancelled at once. Everything runs in a directory
whose name is full of shell metacharacters.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_hase.predict.descriptor import WorkloadDescriptor
from slurm_hase.slurm.runner import CommandResult, SubprocessRunner

pytestmark = pytest.mark.slurm

META_DIR = "dir with space;$(touch pwned)&'q'\"dq\"*|`id`"
SCRIPT = "#!/bin/bash\n#SBATCH --hold\n#SBATCH -o /dev/null\nsleep 1\n"
NO_SHEBANG = "sleep 1\n"
DIRECTIVES = ("#!/bin/bash\n#SBATCH -J from-directives\n#SBATCH --gres=gpu:1\n#SBATCH -t 5\n"
              "#SBATCH --hold -o /dev/null\nsleep 1\n")
HSBATCH = [sys.executable, "-m", "slurm_hase.hsbatch.cli"]
H = ["--hold", "-o", "/dev/null"]

# (id, argv, stdin); "{s}" = the plain script, "{d}" = directives script, "{n}" = no shebang,
# "{dep}" = a held job every shape may depend on
SHAPES: list[tuple[str, list[str], str | None]] = [
    ("plain", ["{s}"], None),
    ("parsable", ["--parsable", "{s}"], None),
    ("job-name", ["-J", "a name; with $stuff", "{s}"], None),
    ("job-name-eq", ["--job-name=x*y", "{s}"], None),
    ("abbrev", ["--job=abbr", "--part=gpu", "{s}"], None),
    ("clustered-flags", ["-HQ", "-o", "/dev/null", "{s}"], None),
    ("wrap", [*H, "--wrap", "echo hi; echo 'there'"], None),
    ("wrap-parsable", [*H, "--parsable", "--wrap=hostname"], None),
    ("stdin", [*H], SCRIPT),
    ("stdin-parsable", ["--parsable", *H], SCRIPT),
    ("stdin-empty", [*H], ""),
    ("array", ["-a", "0-3", "{s}"], None),
    ("array-throttle", ["--array=1,3,5%2", "--parsable", "{s}"], None),
    ("dependency", ["-d", "afterok:{dep}", "{s}"], None),
    ("dependency-eq", ["--dependency=afterany:{dep}?singleton", "{s}"], None),
    ("singleton", ["--dependency=singleton", "{s}"], None),
    ("test-only", ["--test-only", "{s}"], None),
    ("test-only-gpu", ["--test-only", "-G", "1", "-p", "debug", "{s}"], None),
    ("help", ["--help"], None),
    ("help-short", ["-h"], None),
    ("usage", ["--usage"], None),
    ("version", ["--version"], None),
    ("version-short", ["-V"], None),
    ("bad-option", ["--bogus", "{s}"], None),
    ("ambiguous-option", ["--par", "gpu", "{s}"], None),
    ("missing-value", ["-J"], None),
    ("missing-script", ["./no-such-script.sh"], None),
    ("no-shebang", ["{n}"], None),
    ("gres-typed", ["--gres=gpu:a100:1", "{s}"], None),
    ("gpus-untyped", ["--gpus=2", "{s}"], None),
    ("gpus-typed-short", ["-G", "v100:1", "{s}"], None),
    ("mps", ["--gres=mps:50", "{s}"], None),
    ("partition", ["-p", "debug", "{s}"], None),
    ("bad-partition", ["-p", "nosuch", "{s}"], None),
    ("account", ["-A", "teama", "{s}"], None),
    ("bad-account", ["-A", "nosuchaccount", "{s}"], None),
    ("comment", ["--comment", "my comment; $x", "{s}"], None),
    ("constraint-or", ["-C", "a100|v100", "{s}"], None),
    ("bad-constraint", ["-C", "nosuchfeature", "{s}"], None),
    ("script-args", ["{s}", "a", "b c", "--hase-model=x", "-J", ";"], None),
    ("directives", ["{d}"], None),
    ("time-mem", ["-t", "10", "--mem=100", "{s}"], None),
    ("bad-time", ["--time=soon", "{s}"], None),
    ("export-none", ["--export=NONE", "{s}"], None),
    ("nodes-tasks", ["-N", "2", "-n", "2", "{s}"], None),
    ("nice", ["--nice=10", "{s}"], None),
    ("wrap-and-script", ["--wrap=true", "{s}"], None),
    ("chdir", ["-D", "/tmp", "{s}"], None),
    ("double-dash", ["--", "{s}"], None),
]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("hsbatch") / META_DIR
    d.mkdir()
    (d / "job;$x.sh").write_text(SCRIPT)
    (d / "directives.sh").write_text(DIRECTIVES)
    (d / "noshebang.sh").write_text(NO_SHEBANG)
    return d


@pytest.fixture(scope="module")
def dep_job(slurm_runner: SubprocessRunner, workdir: Path) -> Iterator[str]:
    r = slurm_runner.run(["sbatch", "--parsable", str(workdir / "job;$x.sh")], cwd=str(workdir))
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip().split(";")[0]
    yield job_id
    slurm_runner.run(["scancel", job_id])


def _expand(argv: list[str], workdir: Path, dep: str) -> list[str]:
    subst = {"{s}": str(workdir / "job;$x.sh"), "{d}": str(workdir / "directives.sh"),
             "{n}": str(workdir / "noshebang.sh")}
    return [subst.get(a, a).replace("{dep}", dep) for a in argv]


def _job_ids(text: str) -> list[str]:
    ids = re.findall(r"Submitted batch job (\d+)", text)
    ids += re.findall(r"^(\d+)(?:;\S*)?$", text, flags=re.M)
    return ids


def _normal(text: str) -> str:
    text = re.sub(r"Submitted batch job \d+", "Submitted batch job N", text)
    text = re.sub(r"^\d+(;\S*)?$", r"N\1", text, flags=re.M)
    return re.sub(r"Job \d+ to start at \S+ using \d+ processors on nodes \S+",
                  "Job N to start at T using P processors on nodes X", text)


def _submit(runner: SubprocessRunner, argv: list[str], stdin: str | None, cwd: Path,
            keep: str = "") -> CommandResult:
    result = runner.run(argv, stdin=stdin if stdin is not None else "", cwd=str(cwd), timeout_s=60)
    ids = set(_job_ids(result.stdout))
    # -Q prints no job id: also cancel every job submitted from our directory but `keep`
    listed = runner.run(["squeue", "-h", "-o", "%i %Z"]).stdout.splitlines()
    ids |= {line.split(" ", 1)[0].split("_")[0] for line in listed if line.endswith(" " + str(cwd))}
    ids.discard(keep)
    for job_id in sorted(ids):  # one by one: a finished id must not stop the others
        runner.run(["scancel", job_id])
    return result


@pytest.mark.parametrize(("argv", "stdin"), [s[1:] for s in SHAPES], ids=[s[0] for s in SHAPES])
def test_same_as_sbatch(slurm_runner: SubprocessRunner, workdir: Path, dep_job: str,
                        argv: list[str], stdin: str | None) -> None:
    args = _expand(argv, workdir, dep_job)
    real = _submit(slurm_runner, ["sbatch", *args], stdin, workdir, dep_job)
    ours = _submit(slurm_runner, [*HSBATCH, *args], stdin, workdir, dep_job)
    assert ours.returncode == real.returncode
    assert _normal(ours.stdout) == _normal(real.stdout) + (_help_tail() if "-h" in args or "--help" in args else "")
    assert _normal(ours.stderr) == _normal(real.stderr)
    assert not (workdir / "pwned").exists()


def _help_tail() -> str:
    from slurm_hase.hsbatch.text import HELP

    return HELP


def _show(runner: SubprocessRunner, job_id: str) -> str:
    return runner.run(["scontrol", "show", "job", "-o", job_id]).stdout


def test_description_and_constraint_reach_slurm(slurm_runner: SubprocessRunner, workdir: Path) -> None:
    script = workdir / "described.sh"
    # --begin keeps it from running (a held job gets no constraint: sbatch does not check one)
    script.write_text("#!/bin/bash\n#SBATCH --begin=now+3600 -o /dev/null\n#SBATCH --gpus=1\n"
                      "#HASE params=7000 gflops=5000 precision=fp16\nsleep 1\n")
    r = slurm_runner.run([*HSBATCH, "--parsable", "-J", "n;$(x) 'q'", str(script)], cwd=str(workdir))
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip()
    try:
        shown = _show(slurm_runner, job_id)
        comment = re.search(r"Comment=(.*?) (?:StdErr|StdIn|StdOut|Power|TresPerJob|MailUser)=", shown)
        assert comment is not None, shown
        # the constraint hsbatch added is recorded in the description, so the daemon may change it
        assert WorkloadDescriptor.from_comment(comment.group(1)) == WorkloadDescriptor(
            params_m=7000, gflops_per_iter=5000, precision="fp16", auto_types=("a100",))
        assert "Features=a100 " in shown  # 28 GB of weights+grads fit only the 40 GB A100
        assert "JobName=n;$(x) 'q' " in shown
        assert f"Command={script}" in shown
    finally:
        slurm_runner.run(["scancel", job_id])


def test_bad_hase_line_submits_nothing(slurm_runner: SubprocessRunner, workdir: Path) -> None:
    script = workdir / "bad.sh"
    script.write_text("#!/bin/bash\n#SBATCH --hold\n#HASE precision=fp99\nsleep 1\n")
    before = slurm_runner.run(["squeue", "-h", "-o", "%i"]).stdout.split()
    r = slurm_runner.run([*HSBATCH, "-J", "bad-hase", str(script)], cwd=str(workdir))
    assert r.returncode == 2 and r.stdout == ""
    assert "bad.sh line 3" in r.stderr and "precision" in r.stderr
    after = slurm_runner.run(["squeue", "-h", "-n", "bad-hase", "-o", "%i"]).stdout.split()
    assert [j for j in after if j not in before] == []


def test_fail_open_with_corrupt_model(slurm_runner: SubprocessRunner, workdir: Path) -> None:
    model = workdir / "model;.json"
    model.write_text("{not json")
    script = workdir / "failopen.sh"
    script.write_text("#!/bin/bash\n#SBATCH --hold -o /dev/null -G 1 -t 5\n"
                      "#HASE model=resnet50 iterations=100\nsleep 1\n")
    r = slurm_runner.run([*HSBATCH, "--parsable", "--hase-explain", f"--hase-predictor={model}",
                          str(script)], cwd=str(workdir))
    ids = _job_ids(r.stdout)
    for job_id in ids:
        slurm_runner.run(["scancel", job_id])
    assert r.returncode == 0 and len(ids) == 1
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("hsbatch: warning:")
    shown = _show(slurm_runner, ids[0])
    # no prediction, so no constraint; the (valid) description is attached for the daemon
    assert 'Comment={"hase":1,"model":"resnet50"' in shown and "Features=(null)" in shown
