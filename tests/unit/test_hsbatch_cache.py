"""hsbatch's per-user cluster cache: a fresh hit asks Slurm nothing, anything else asks again."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from slurm_hase.hsbatch import cluster
from slurm_hase.hsbatch.core import Deps, Io, run
from slurm_hase.slurm.runner import CommandResult


def node(name: str, gtype: str, parts: str, state: str = "IDLE") -> str:
    return (f"NodeName={name} CPUAlloc=0 CPUTot=8 AvailableFeatures={gtype} ActiveFeatures={gtype} "
            f"Gres=gpu:{gtype}:4,mps:{gtype}:400 State={state} Partitions={parts} AllocTRES=")


NODES_TEXT = "\n".join([node("a100-1", "a100", "gpu"), node("a100-2", "a100", "gpu"),
                        node("t4-1", "t4", "gpu,debug"), node("v100-1", "v100", "gpu")]) + "\n"
PARTS_TEXT = ("PartitionName=gpu Default=YES Nodes=a100-[1-2],t4-1,v100-1 State=UP\n"
              "PartitionName=debug Default=NO Nodes=t4-1 State=UP\n")
JOB = "#!/bin/bash\n#SBATCH --gpus=1\n#HASE params=7000 gflops=5000 precision=fp16\nsrun true\n"


class CountingRunner:
    """Answers scontrol from the texts above and sbatch with a job id; counts scontrol calls."""

    def __init__(self) -> None:
        self.scontrol = 0
        self.sbatch: list[list[str]] = []

    def run(self, argv: Sequence[str], *, stdin: str | None = None,
            env: Mapping[str, str] | None = None, timeout_s: float = 60.0,
            cwd: str | None = None) -> CommandResult:
        if argv[0] == "scontrol":
            self.scontrol += 1
            return CommandResult(tuple(argv), 0, NODES_TEXT if argv[2] == "node" else PARTS_TEXT, "")
        self.sbatch.append(list(argv))
        return CommandResult(tuple(argv), 0, "Submitted batch job 7\n", "")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=test\n")
    return {"XDG_CACHE_HOME": str(tmp_path / "cache"), "SLURM_CONF": str(conf)}


def submit(runner: CountingRunner, env: Mapping[str, str], tmp_path: Path, *args: str,
           cache: bool = True) -> tuple[int, str]:
    job = tmp_path / "job.sh"
    job.write_text(JOB)
    err = io.StringIO()
    code = run([*args, str(job)], Io(lambda: "", io.StringIO(), err, env),
               Deps(runner=runner, cache=cache))
    return code, err.getvalue()


def cache_file(env: Mapping[str, str]) -> Path:
    directory = cluster.cache_dir(env)
    assert directory is not None
    return Path(cluster.cache_path(directory, cluster.cache_key(env)))


def test_hit_asks_slurm_nothing_and_adds_the_same(env: dict[str, str], tmp_path: Path) -> None:
    r = CountingRunner()
    assert submit(r, env, tmp_path) == (0, "")
    assert r.scontrol == 2 and cache_file(env).is_file()
    assert oct(cache_file(env).stat().st_mode & 0o777) == "0o600"
    assert submit(r, env, tmp_path) == (0, "")
    assert r.scontrol == 2  # the second submission was served from the cache
    assert r.sbatch[0] == r.sbatch[1] and "--constraint=a100" in r.sbatch[1]
    submit(r, env, tmp_path, "-p", "debug")  # partitions are judged from the cached summary
    assert r.scontrol == 2 and not any(a.startswith("--constraint") for a in r.sbatch[2])
    assert not [p for p in cache_file(env).parent.iterdir() if p.name.endswith(".tmp")]


def test_expired_or_future_entries_are_refreshed(env: dict[str, str], tmp_path: Path) -> None:
    r = CountingRunner()
    submit(r, env, tmp_path)
    for shift in (cluster.CACHE_TTL_S + 1, -600.0):
        doc = json.loads(cache_file(env).read_text())
        doc["written"] -= shift
        cache_file(env).write_text(json.dumps(doc))
        before = r.scontrol
        submit(r, env, tmp_path)
        assert r.scontrol == before + 2
    submit(r, env, tmp_path)
    assert r.scontrol == 6  # rewritten after the refresh


@pytest.mark.parametrize("content", [
    "{not json", "", "[]", '{"version": 1}',
    '{"version":1,"key":KEY,"written":NOW,"summary":{"defaults":["gpu"],"memory_gb":{},'
    '"groups":[[["gpu"],true,{"a100":"4"},[],1]]}}',
    '{"version":1,"key":KEY,"written":NOW,"summary":{"defaults":"gpu","memory_gb":{},"groups":[]}}',
    '{"version":99,"key":KEY,"written":NOW,"summary":{"defaults":[],"memory_gb":{},"groups":[]}}',
])
def test_corrupt_cache_is_a_miss(env: dict[str, str], tmp_path: Path, content: str) -> None:
    import time

    path = cache_file(env)
    path.parent.mkdir(parents=True)
    path.write_text(content.replace("KEY", json.dumps(cluster.cache_key(env)))
                    .replace("NOW", str(time.time())))
    r = CountingRunner()
    assert submit(r, env, tmp_path) == (0, "")
    assert r.scontrol == 2 and "--constraint=a100" in r.sbatch[0]
    assert json.loads(path.read_text())["version"] == cluster.CACHE_VERSION  # repaired
    submit(r, env, tmp_path)
    assert r.scontrol == 2


def test_other_slurm_conf_or_changed_conf_is_a_miss(env: dict[str, str], tmp_path: Path) -> None:
    r = CountingRunner()
    submit(r, env, tmp_path)
    other = tmp_path / "other.conf"
    other.write_text("ClusterName=other\n")
    submit(r, {**env, "SLURM_CONF": str(other)}, tmp_path)
    assert r.scontrol == 4
    submit(r, env, tmp_path)  # the first cluster's entry is still there
    assert r.scontrol == 4
    st = os.stat(env["SLURM_CONF"])
    os.utime(env["SLURM_CONF"], ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # slurm.conf edited
    submit(r, env, tmp_path)
    assert r.scontrol == 6


def test_unusable_cache_dir_never_fails_the_submission(env: dict[str, str], tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    r = CountingRunner()
    for _ in range(2):
        assert submit(r, {**env, "XDG_CACHE_HOME": str(blocker)}, tmp_path) == (0, "")
    assert r.scontrol == 4 and all("--constraint=a100" in a for a in r.sbatch)


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to give the file to another user")
def test_foreign_cache_file_is_ignored(env: dict[str, str], tmp_path: Path) -> None:
    r = CountingRunner()
    submit(r, env, tmp_path)
    os.chown(cache_file(env), 4242, -1)
    submit(r, env, tmp_path)
    assert r.scontrol == 4


def test_cache_off_unless_asked(env: dict[str, str], tmp_path: Path) -> None:
    r = CountingRunner()
    for _ in range(2):
        submit(r, env, tmp_path, cache=False)
    assert r.scontrol == 4 and not Path(env["XDG_CACHE_HOME"]).exists()


def test_cache_dir_choice() -> None:
    assert cluster.cache_dir({"XDG_CACHE_HOME": "/x/c", "HOME": "/h"}) == "/x/c/slurm-hase"
    assert cluster.cache_dir({"XDG_CACHE_HOME": "rel", "HOME": "/h"}) == "/h/.cache/slurm-hase"
    assert cluster.cache_dir({"HOME": "/h"}) == "/h/.cache/slurm-hase"


@pytest.mark.parametrize("kind", ["fifo", "symlink", "dir"])
def test_odd_cache_entries_are_misses(env: dict[str, str], tmp_path: Path, kind: str) -> None:
    r = CountingRunner()
    submit(r, env, tmp_path)
    path = cache_file(env)
    real = tmp_path / "real.json"
    path.rename(real)
    if kind == "fifo":
        os.mkfifo(path)  # reading it would block without O_NONBLOCK
    elif kind == "symlink":
        path.symlink_to(real)
    else:
        path.mkdir()
    assert cluster.load(str(path.parent), cluster.cache_key(env), os.path.getmtime(real)) is None
    assert submit(r, env, tmp_path)[0] == 0 and r.scontrol == 4
