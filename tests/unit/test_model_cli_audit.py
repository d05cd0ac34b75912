"""`hase model`: versions never writes, predict's fits column and de-duplicated GPU types,
'shipped' everywhere a model file is asked for, input files that are not UTF-8, a closed pipe."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_hase.predict.registry import TABLE, ModelRegistry
from tests.conftest import REPO
from tests.conftest import run_main as _main

SACCT = REPO / "tests" / "fixtures" / "slurm" / "24.11" / "sacct.json"
SMALL = str(REPO / "tests" / "fixtures" / "predict" / "measurements_small.csv")
Capsys = pytest.CaptureFixture[str]


# -- 6: versions -----------------------------------------------------------------------------

def test_versions_of_an_empty_file_writes_nothing(tmp_path: Path, capsys: Capsys) -> None:
    reg = tmp_path / "empty.sqlite"
    reg.write_bytes(b"")
    code, out, err = _main(["model", "versions", "--registry", str(reg)], capsys)
    assert code == 0, err
    assert out == f"no model versions in {reg}\n"
    assert reg.read_bytes() == b""  # no schema written into it
    code, out, _ = _main(["model", "versions", "--registry", str(reg), "--json"], capsys)
    assert code == 0 and json.loads(out) == []


def test_versions_of_another_sqlite_file_adds_no_table(tmp_path: Path, capsys: Capsys) -> None:
    db = tmp_path / "other.db"
    con = sqlite3.connect(db)
    con.execute("create table t (x)")
    con.commit()
    con.close()
    before = db.read_bytes()
    code, out, _ = _main(["model", "versions", "--registry", str(db)], capsys)
    assert code == 0 and out == f"no model versions in {db}\n"
    assert db.read_bytes() == before


def test_versions_refuses_a_file_that_is_not_sqlite(tmp_path: Path, capsys: Capsys) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not a database, just some words in a text file\n" * 4)
    code, out, err = _main(["model", "versions", "--registry", str(text)], capsys)
    assert code == 1 and out == ""
    assert err == f"hase: error: {text}: cannot open model registry (file is not a database)\n"


def test_versions_lists_stored_versions(tmp_path: Path, capsys: Capsys) -> None:
    from slurm_hase.predict.modelfile import load_predictor

    reg = tmp_path / "models.sqlite"
    ModelRegistry(reg).save(load_predictor(), note="first")
    code, out, _ = _main(["model", "versions", "--registry", str(reg)], capsys)
    assert code == 0 and out.startswith("v1  ") and out.rstrip().endswith("first")
    con = sqlite3.connect(reg)
    assert con.execute(f"select count(*) from {TABLE}").fetchone() == (1,)
    con.close()


# -- 8: the memory fit -----------------------------------------------------------------------

def test_predict_shows_whether_the_weights_fit(capsys: Capsys) -> None:
    # 1e6 M parameters in fp32 training: 8 TB of weights and gradients per GPU
    argv = ["model", "predict", "--gflops", "1e6", "--params", "1e6", "--batch-size", "1",
            "--gpu", "k80", "--gpu", "a100"]
    code, out, err = _main(argv, capsys)
    assert code == 0, err
    head, *rows = out.splitlines()
    assert head.split()[-1] == "fits"
    assert {r.split()[0]: r.split()[-1] for r in rows} == {"k80": "no", "a100": "no"}
    assert "the weights need at least 8000.0 GB per GPU" in err
    code, out, _ = _main([*argv, "--json"], capsys)
    assert {p["gpu_type"]: p["fits_memory"] for p in json.loads(out)} == {"k80": False, "a100": False}


def test_predict_fit_is_hsbatchs_judgement(capsys: Capsys) -> None:
    from slurm_hase.hsbatch import plan
    from slurm_hase.predict.catalog import resolve_gpu
    from slurm_hase.predict.descriptor import WorkloadDescriptor

    # 5000 M parameters, fp16 training (weights + gradients): 20 GB, more than a T4's 16 GB
    desc = WorkloadDescriptor(gflops_per_iter=100.0, params_m=5000.0, batch_size=8,
                              precision="fp16")
    need = plan.min_memory_gb(desc, plan.params_m(desc))
    assert need is not None
    code, out, _ = _main(["model", "predict", "--gflops", "100", "--params", "5000",
                          "--batch-size", "8", "--precision", "fp16", "--gpu", "t4",
                          "--gpu", "a100", "--json"], capsys)
    assert code == 0
    got = {p["gpu_type"]: p["fits_memory"] for p in json.loads(out)}
    assert got == {g: need <= resolve_gpu(g).memory_gb for g in ("t4", "a100")}
    assert got == {"t4": False, "a100": True}


def test_predict_fit_is_unknown_without_a_parameter_count(capsys: Capsys) -> None:
    code, out, err = _main(["model", "predict", "--gflops", "100", "--batch-size", "8",
                            "--gpu", "a100"], capsys)
    assert code == 0 and out.splitlines()[1].split()[-1] == "?"
    assert "weights need" not in err


# -- 9: de-duplicated GPU types, a closed pipe -----------------------------------------------

def test_predict_lists_each_gpu_type_once(capsys: Capsys) -> None:
    code, out, _ = _main(["model", "predict", "--model", "resnet50", "--gpu", "k80", "--gpu", "K80",
                          "--gpu", "Tesla K80", "--gpu", "a100"], capsys)
    assert code == 0
    assert sorted(r.split()[0] for r in out.splitlines()[1:]) == ["a100", "k80"]


def test_a_closed_output_pipe_exits_quietly() -> None:
    read, write = os.pipe()
    os.close(read)  # the reader has gone before the first line (`| head -0`)
    try:
        proc = subprocess.run(  # noqa: S603 - argv list
            [sys.executable, "-c", "import sys\nfrom slurm_hase.cli.main import main\n"
             "sys.argv = ['hase', 'model', 'gpus']\nsys.exit(main())"],
            stdout=write, stderr=subprocess.PIPE, text=True, timeout=60, cwd=REPO)
    finally:
        os.close(write)
    assert proc.returncode == 0 and proc.stderr == ""


# -- 10: 'shipped' wherever a model file is asked for ----------------------------------------

def test_predict_model_file_shipped(capsys: Capsys) -> None:
    argv = ["model", "predict", "--model", "resnet50", "--gpu", "a100", "--json"]
    code, default, _ = _main(argv, capsys)
    code2, shipped, err = _main([*argv, "--model-file", "shipped"], capsys)
    assert code == code2 == 0, err
    assert json.loads(shipped) == json.loads(default)


def test_refit_model_file_shipped_and_says_which_file_it_read(capsys: Capsys, tmp_path: Path) -> None:
    code, out, err = _main(["model", "refit", "--data", SMALL, "--sacct-json", str(SACCT),
                            "--model-file", "shipped", "--out", str(tmp_path / "r.json")], capsys)
    assert code == 1 and "hase: error: no usable finished jobs" in err  # read, nothing usable
    assert out.startswith(f"harvested 0 jobs from {SACCT} (skipped ")
    assert "from sacct" not in out and "shipped" not in err


# -- 2: --sacct-json that is not UTF-8 ------------------------------------------------------

def test_refit_sacct_json_not_utf8_is_exit_2(tmp_path: Path, capsys: Capsys) -> None:
    bad = tmp_path / "bin.json"
    bad.write_bytes(b'{"jobs": [\xff]}')
    code, out, err = _main(["model", "refit", "--data", SMALL, "--sacct-json", str(bad),
                            "--out", str(tmp_path / "r.json")], capsys)
    assert code == 2 and out == ""
    assert err == (f"hase: error: --sacct-json {bad}: not UTF-8 text (byte 0xff at offset 10); "
                   "expected the output of `sacct --json -a`\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin.json"]
