"""hsbatch against the real sbatch: jobs sbatch accepts are never lost, their fields kept.

Each case runs the same argv/script through sbatch and through hsbatch on the local cluster.
Jobs get --begin=now+3600 (a held job skips the node-configuration check that refuses them)
and are cancelled at the end.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

HSBATCH = [sys.executable, "-m", "slurm_hase.hsbatch.cli"]
DESC = "#HASE model=resnet50 iterations=100000\n"
BEGIN = "--begin=now+3600"


@pytest.fixture()
def submitted(slurm_env: dict[str, str]) -> Iterator[list[str]]:
    ids: list[str] = []
    yield ids
    if ids:
        subprocess.run(["scancel", *ids], env=slurm_env, capture_output=True, check=False)


def _run(cmd: list[str], env: dict[str, str], cwd: Path, ids: list[str]) -> subprocess.CompletedProcess[bytes]:
    r = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, stdin=subprocess.DEVNULL,
                       timeout=120, check=False)
    ids.extend(i.decode() for i in re.findall(rb"Submitted batch job (\d+)", r.stdout))
    return r


def _field(env: dict[str, str], job: str, name: str) -> str:
    out = subprocess.run(["scontrol", "show", "job", "-o", job], env=env, capture_output=True,
                         text=True, check=True).stdout
    m = re.search(rf"\b{name}=(\S*)", out)
    return m.group(1) if m else ""


def _both(env: dict[str, str], cwd: Path, args: list[str], ids: list[str]):  # type: ignore[no-untyped-def]
    s = _run(["sbatch", *args], env, cwd, ids)
    h = _run([*HSBATCH, *args], env, cwd, ids)
    return s, h


def _script(tmp_path: Path, body: str) -> str:
    p = tmp_path / "job.sh"
    p.write_text("#!/bin/bash\n" + body + "srun true\n")
    return str(p)


@pytest.mark.parametrize("case,args,header", [
    ("exclude", ["-G", "1", "-x", "a100-[1-2],v100-[1-2]"], ""),
    ("gpus-12", ["--gpus=12"], ""),
    ("5-nodes", ["-N5", "--gpus-per-node=1"], ""),
    ("40-tasks", ["-n", "40", "--gpus=1"], ""),
    ("pbs-queue", ["-G", "1"], "#PBS -q debug\n"),
    ("directive-no-blank", ["-G", "1"], "#SBATCH--partition=debug\n"),
])
def test_job_sbatch_accepts_is_not_lost(slurm_env: dict[str, str], tmp_path: Path,
                                        submitted: list[str], case: str, args: list[str],
                                        header: str) -> None:
    s = _script(tmp_path, header + DESC)
    sb, hs = _both(slurm_env, tmp_path, [BEGIN, *args, s], submitted)
    assert sb.returncode == 0, sb.stderr
    assert hs.returncode == 0, f"{case}: sbatch accepted, hsbatch: {hs.stderr!r}"


def test_users_directive_constraint_and_comment_are_kept(slurm_env: dict[str, str],
                                                         tmp_path: Path,
                                                         submitted: list[str]) -> None:
    s = _script(tmp_path, "#SBATCH--constraint=t4\n#SBATCH--comment=mine\n" + DESC)
    sb, hs = _both(slurm_env, tmp_path, [BEGIN, "-G", "1", s], submitted)
    assert sb.returncode == hs.returncode == 0, (sb.stderr, hs.stderr)
    s_id, h_id = submitted[0], submitted[1]
    assert _field(slurm_env, s_id, "Features") == "t4"
    assert _field(slurm_env, h_id, "Features") == "t4"
    assert _field(slurm_env, h_id, "Comment") == _field(slurm_env, s_id, "Comment") == "mine"


def test_verbose_non_utf8_output_is_relayed(slurm_env: dict[str, str], tmp_path: Path,
                                            submitted: list[str]) -> None:
    tag = f"audit-{tmp_path.name}"
    args = [BEGIN, "-v", "-J", "caf\udce9", f"--comment={tag}", "--wrap", "true"]  # byte 0xe9
    sb, hs = _both(slurm_env, tmp_path, args, submitted)
    queued = subprocess.run(["squeue", "-h", "-o", "%i %k"], env=slurm_env, capture_output=True,
                            text=True, check=False).stdout
    mine = [line.split()[0] for line in queued.splitlines() if line.endswith(" " + tag)]
    submitted.extend(i for i in mine if i not in submitted)  # cancel even the unreported one
    assert sb.returncode == 0 and len(mine) == 2  # both submitted the job
    assert hs.returncode == 0, hs.stderr[-400:]
    assert re.fullmatch(rb"Submitted batch job \d+\n", hs.stdout), hs.stdout


def test_a_held_job_gets_no_constraint_nodes_cannot_meet(slurm_env: dict[str, str],
                                                         tmp_path: Path,
                                                         submitted: list[str]) -> None:
    """sbatch takes a held job without checking node configuration: hsbatch's constraint for
    '-N5' (a100 or a100|v100: 2 or 4 nodes) would leave it pending for ever once released."""
    s = _script(tmp_path, DESC)
    sb, hs = _both(slurm_env, tmp_path, ["--hold", "-N5", "--gpus-per-node=1", s], submitted)
    assert sb.returncode == 0 and hs.returncode == 0, (sb.stderr, hs.stderr)
    job = re.findall(rb"Submitted batch job (\d+)", hs.stdout)[0].decode()
    assert _field(slurm_env, job, "Features") == "(null)"


def test_a_refusal_the_constraint_did_not_cause_is_relayed_once(slurm_env: dict[str, str],
                                                               tmp_path: Path,
                                                               submitted: list[str]) -> None:
    s = _script(tmp_path, DESC)
    sb, hs = _both(slurm_env, tmp_path, [BEGIN, "-A", "no-such-account", "--gpus=1", s],
                   submitted)
    assert sb.returncode != 0 and hs.returncode == sb.returncode
    assert b"without that constraint" not in hs.stderr
    assert hs.stderr.strip().splitlines()[-1] == sb.stderr.strip().splitlines()[-1]


def test_a_retried_job_records_no_constraint(slurm_env: dict[str, str], tmp_path: Path,
                                             submitted: list[str]) -> None:
    s = _script(tmp_path, DESC)
    hs = _run([*HSBATCH, BEGIN, "-N5", "--gpus-per-node=1", s], slurm_env, tmp_path, submitted)
    assert hs.returncode == 0 and b"without that constraint" in hs.stderr, hs.stderr
    job = re.findall(rb"Submitted batch job (\d+)", hs.stdout)[0].decode()
    assert _field(slurm_env, job, "Features") == "(null)"
    comment = _field(slurm_env, job, "Comment")
    assert "resnet50" in comment and '"at"' not in comment, comment


@pytest.mark.parametrize("how", ["process-substitution", "pipe-to-dev-stdin"])
def test_a_script_read_from_a_pipe_is_not_lost(slurm_env: dict[str, str], tmp_path: Path,
                                               submitted: list[str], how: str) -> None:
    """A script sbatch can read only once (`<(...)`, `... | sbatch /dev/stdin`): hsbatch reads
    it for its description and hands sbatch a copy, so both submit, and the description and
    the job's own directives count; the copy is gone afterwards."""
    s = _script(tmp_path, f"#SBATCH {BEGIN}\n#SBATCH -J piped\n" + DESC)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**slurm_env, "TMPDIR": str(tmp)}
    for tool in ("sbatch", " ".join(HSBATCH)):
        line = (f"{tool} --parsable <(cat {s})" if how == "process-substitution"
                else f"cat {s} | {tool} --parsable /dev/stdin")
        r = subprocess.run(["bash", "-c", line], env=env, cwd=tmp_path, capture_output=True,
                           text=True, timeout=120, check=False)
        assert r.returncode == 0, f"{tool}: {r.stderr!r}"
        job = r.stdout.strip().split(";")[0]
        submitted.append(job)
        assert _field(slurm_env, job, "JobName") == "piped"
    assert '"model":"resnet50"' in _field(slurm_env, job, "Comment")  # hsbatch's job
    assert list(tmp.iterdir()) == []


def _default_sigint() -> None:
    """In the child before exec: SIGINT's default action (an ignored one is inherited)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _waiting(cmd: list[str], name: str, env: dict[str, str], cwd: Path
             ) -> subprocess.Popen[str]:
    """`cmd --wait` of a 60 s job named `name`, in a session of its own, once the job is queued
    and sbatch waits on it. SIGINT as a terminal's Ctrl-C finds it: a shell without job control
    (CI started with `&`) runs its background commands with SIGINT ignored, and they inherit
    that."""
    import time

    p = subprocess.Popen([*cmd, "--wait", "-J", name, "-o", "/dev/null", "--wrap", "sleep 60"],
                         env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True, preexec_fn=_default_sigint)
    deadline = time.monotonic() + 60
    while not subprocess.run(["squeue", "-h", "-n", name, "-o", "%i"], env=env,
                             capture_output=True, text=True, check=False).stdout.strip():
        assert time.monotonic() < deadline, "no job submitted within 60 s"
        time.sleep(0.2)
    time.sleep(1)  # sbatch is waiting now
    return p


def test_ctrl_c_during_wait_still_relays_the_job_id(slurm_env: dict[str, str], tmp_path: Path,
                                                    submitted: list[str]) -> None:
    """Ctrl-C (SIGINT to the foreground process group) while `--wait` waits: sbatch ends and
    the job runs on; hsbatch relays sbatch's "Submitted batch job N" and exits 130, as sbatch
    does (128 + SIGINT), rather than dying with a traceback and the id lost."""
    import os
    import signal

    for n, cmd in enumerate((["sbatch"], HSBATCH)):
        p = _waiting(cmd, f"it-ctrl-c-{os.getpid()}-{n}", slurm_env, tmp_path)
        os.killpg(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=60)
        ids = re.findall(r"Submitted batch job (\d+)", out)
        submitted.extend(ids)
        assert len(ids) == 1, f"{cmd[0]}: {out!r} {err!r}"
        assert p.returncode in (130, -signal.SIGINT) and "Traceback" not in err, (cmd, err)


def test_sigterm_to_hsbatch_alone_during_wait_reaches_sbatch(slurm_env: dict[str, str],
                                                            tmp_path: Path,
                                                            submitted: list[str]) -> None:
    """`kill PID` of a waiting hsbatch (not its process group): the real sbatch gets the
    SIGTERM too and ends as it does when killed itself; hsbatch relays its "Submitted batch job
    N" and exits with sbatch's code, and no sbatch is left behind."""
    import os
    import signal

    codes = []
    for n, cmd in enumerate((["sbatch"], HSBATCH)):
        p = _waiting(cmd, f"it-term-{os.getpid()}-{n}", slurm_env, tmp_path)
        os.kill(p.pid, signal.SIGTERM)
        out, err = p.communicate(timeout=60)
        ids = re.findall(r"Submitted batch job (\d+)", out)
        submitted.extend(ids)
        assert len(ids) == 1, f"{cmd[0]}: {out!r} {err!r}"
        assert "Traceback" not in err, err
        codes.append(128 - p.returncode if p.returncode < 0 else p.returncode)
        left = subprocess.run(["pgrep", "-s", str(p.pid), "-f", "sbatch"], capture_output=True,
                              text=True, check=False).stdout.split()
        assert left == [], f"{cmd[0]}: sbatch left running: {left}"
    assert codes[1] == codes[0], codes  # hsbatch ends as sbatch ends


def test_nodefile_from_process_substitution(slurm_env: dict[str, str], tmp_path: Path,
                                            submitted: list[str]) -> None:
    """`--nodefile=<(...)`: sbatch reads the /dev/fd/N itself; hsbatch's sbatch gets a copy
    (it would not have that descriptor open), so both jobs ask for the same nodes."""
    import shlex

    got = []
    for cmd in ("sbatch", " ".join(map(shlex.quote, HSBATCH))):
        r = subprocess.run(["bash", "-c", f"{cmd} {BEGIN} -G 1 -o /dev/null "
                            "--nodefile=<(echo v100-2) --wrap true"], env=slurm_env,
                           cwd=tmp_path, capture_output=True, text=True, timeout=120,
                           check=False)
        ids = re.findall(r"Submitted batch job (\d+)", r.stdout)
        submitted.extend(ids)
        assert r.returncode == 0 and len(ids) == 1, (cmd, r.stdout, r.stderr)
        got.append(_field(slurm_env, ids[0], "ReqNodeList"))
    assert got == ["v100-2", "v100-2"], got


def test_unknown_option_without_script_is_refused_at_once(slurm_env: dict[str, str],
                                                         tmp_path: Path) -> None:
    """`hsbatch --bogus` with no script: sbatch's own refusal, at once (it used to wait for a
    script on stdin); the same exit code as sbatch's."""
    codes = []
    for cmd in (["sbatch"], HSBATCH):
        p = subprocess.Popen([*cmd, "--bogus"], env=slurm_env, cwd=tmp_path,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            p.wait(timeout=30)  # with stdin left open: no end of a script ever comes
        finally:
            p.kill()
            out, err = p.communicate()
        codes.append(p.returncode)
        assert "unrecognized option" in err and out == "", (cmd, out, err)
    assert codes[0] == codes[1] != 0
