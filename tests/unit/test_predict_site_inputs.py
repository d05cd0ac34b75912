"""What a site hands the predictor: a --registry that is someone else's SQLite file, refit fed
its own earlier rows back (one row per harvested job), a descriptor key given twice."""

from __future__ import annotations

import copy
import json
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from slurm_hase.errors import DescriptorError, StoreError
from slurm_hase.predict.dataset import Measurement, read_csv
from slurm_hase.predict.descriptor import WorkloadDescriptor
from slurm_hase.predict.modelfile import load_predictor
from slurm_hase.predict.registry import TABLE, ModelRegistry
from tests.conftest import run_main as _main

Capsys = pytest.CaptureFixture[str]
ITERS = 2000


@pytest.fixture(scope="module")
def small(fixtures_dir: Path) -> str:
    return str(fixtures_dir / "predict" / "measurements_small.csv")


@pytest.fixture()
def quick_train(monkeypatch: pytest.MonkeyPatch) -> list[list[Measurement]]:
    """train() kept real but small (5 rounds, no P90, calibration, completion or pair memory);
    the rows of each call are recorded."""
    import slurm_hase.predict.train as train_mod

    real = train_mod.train
    calls: list[list[Measurement]] = []

    def quick(rows: Any, **kw: Any) -> Any:
        calls.append(list(rows))
        return real(rows, rounds=5, with_p90=False, calibrated=False, completed=False, paired=False,
                    note=kw.get("note", ""))

    monkeypatch.setattr(train_mod, "train", quick)
    return calls


def _other_db(path: Path) -> bytes:
    con = sqlite3.connect(path)
    con.execute("create table jobs (id integer primary key, name text)")
    con.execute("insert into jobs values (1, 'x')")
    con.commit()
    con.close()
    return path.read_bytes()


# -- 3: --registry must be a model registry ------------------------------------------------------

def test_another_sqlite_file_is_not_made_a_registry(tmp_path: Path) -> None:
    db = tmp_path / "site-state.db"
    before = _other_db(db)
    with pytest.raises(StoreError, match=rf"{db}: not a model registry: .*\(jobs\) and no {TABLE} table"):
        ModelRegistry.check(db)
    with pytest.raises(StoreError, match="not a model registry"):
        ModelRegistry(db)
    assert db.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site-state.db"]  # no journal either
    # listing it still finds no versions and writes nothing (versions is read-only)
    assert ModelRegistry.read_versions(db) == [] and db.read_bytes() == before


def test_new_empty_and_existing_registries_are_fine(tmp_path: Path) -> None:
    pred = load_predictor()
    new = tmp_path / "new.sqlite"
    ModelRegistry.check(new)
    assert ModelRegistry(new).save(pred, note="a") == 1
    ModelRegistry.check(new)  # a registry now
    assert ModelRegistry(new).save(pred, note="b") == 2
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    ModelRegistry.check(empty)
    assert ModelRegistry(empty).save(pred) == 1


def test_cli_refuses_another_sqlite_file_before_training(
    tmp_path: Path, small: str, quick_train: list[list[Measurement]], capsys: Capsys,
) -> None:
    db = tmp_path / "site-state.db"
    before = _other_db(db)
    out = tmp_path / "m.json"
    code, stdout, err = _main(["model", "train", "--data", small, "--out", str(out), "--registry", str(db)], capsys)
    assert code == 2, (stdout, err)
    assert f"hase: error: --registry {db}: not a model registry" in err
    assert db.read_bytes() == before and not out.exists() and not quick_train


# -- 4: refit keeps one row per harvested job ----------------------------------------------------

@pytest.fixture(scope="module")
def real(small: str) -> list[Measurement]:
    """Real exclusive single-GPU training rows (Gavel) from the small fixture."""
    return [m for m in read_csv(small)
            if not m.desc.corunner_gflops and m.desc.num_gpus == 1 and m.desc.mode == "train"][:6]


def _sacct_json(fixtures_dir: Path, rows: list[Measurement]) -> str:
    """The captured 24.11 `sacct --json` with its completed job 1 cloned once per real row
    (job ids 1001...: the GPU type, descriptor and elapsed time = iteration time x ITERS)."""
    doc = json.loads((fixtures_dir / "slurm" / "24.11" / "sacct.json").read_text())
    template = next(j for j in doc["jobs"] if j["job_id"] == 1)
    jobs = []
    for n, m in enumerate(rows, 1):
        job = copy.deepcopy(template)
        job["job_id"] = 1000 + n
        job["comment"]["job"] = json.dumps({"hase": 1, "model": m.desc.model, "bs": m.desc.batch_size,
                                            "iters": ITERS})
        job["time"]["elapsed"] = round(m.iter_time_s * ITERS)
        for t in job["tres"]["allocated"]:
            if t["name"].startswith("gpu:"):
                t["name"] = f"gpu:{m.gpu}"
        jobs.append(job)
    doc["jobs"] = jobs
    return json.dumps(doc)


def _jobs(real: list[Measurement], scale: float = 1.0) -> list[Measurement]:
    """The real rows as harvested jobs 101... (time x scale)."""
    from slurm_hase.predict.dataset import make

    return [make(m.gpu, m.desc.model, m.desc.gflops_per_iter, m.desc.params_m, m.desc.batch_size,
                 m.desc.precision, m.desc.mode, m.desc.num_gpus, m.desc.corunner_gflops,
                 m.iter_time_s * scale, f"site:sacct:{101 + i}") for i, m in enumerate(real)]


def test_one_row_per_job_keeps_the_newest(real: list[Measurement]) -> None:
    from slurm_hase.predict.refit import one_row_per_job

    base, saved, again = list(real) * 2, _jobs(real), _jobs(real, 1.01)
    rows, dropped = one_row_per_job([*base, *saved], again)
    assert dropped == 6 and rows == [*base, *again]  # rows without a job id are all kept
    rows, dropped = one_row_per_job(base, [*again, *saved])  # one job twice in sacct's output
    assert dropped == 6 and rows == [*base, *saved]
    assert one_row_per_job(base, again) == ([*base, *again], 0)


def test_refit_counts_each_harvested_job_once(
    real: list[Measurement], quick_train: list[list[Measurement]],
) -> None:
    from slurm_hase.predict.refit import refit

    base = list(real) * 2  # public rows without job ids: all kept, even repeated
    saved = _jobs(real)  # an earlier refit's --save-rows, given back as --data
    again = _jobs(real, 1.01)  # the same six jobs harvested again
    pred = refit([*base, *saved], again)
    [trained] = quick_train
    assert Counter(m.source for m in trained if m.source.startswith("site:")) == {
        f"site:sacct:{101 + i}": 1 for i in range(6)}
    assert pred.meta["sources"]["site"] == 6 and pred.meta["rows"] == len(base) + 6
    assert "6 repeated job rows dropped" in pred.meta["note"]


def test_cli_refit_fed_its_own_rows_back_counts_jobs_once(
    tmp_path: Path, fixtures_dir: Path, small: str, real: list[Measurement],
    quick_train: list[list[Measurement]], capsys: Capsys,
) -> None:
    sacct = tmp_path / "sacct.json"
    sacct.write_text(_sacct_json(fixtures_dir, real))
    out, saved = tmp_path / "r.json", tmp_path / "rows.csv"
    code, stdout, err = _main(["model", "refit", "--data", small, "--sacct-json", str(sacct),
                               "--out", str(out), "--save-rows", str(saved)], capsys)
    assert code == 0, err
    first = load_predictor(out).meta
    assert first["sources"]["site"] == 6
    # the next refit: the saved rows as --data, an overlapping window (the same six jobs)
    code, stdout, err = _main(["model", "refit", "--data", small, "--data", str(saved), "--sacct-json",
                               str(sacct), "--out", str(out)], capsys)
    assert code == 0, err
    meta = load_predictor(out).meta
    assert meta["sources"]["site"] == 6 and meta["rows"] == first["rows"]  # was 12 and 6 more rows
    assert "6 repeated job rows dropped" in meta["note"]
    assert "6 harvested job row(s) were already in --data" in err


def test_predict_spec_refuses_a_key_given_twice(capsys: Capsys) -> None:
    """`hase model predict --spec 'model=resnet50 bs=64 bs=32'` used 32 silently."""
    code, _out, err = _main(["model", "predict", "--spec", "model=resnet50 bs=64 bs=32"], capsys)
    assert code == 2 and "bs: given twice" in err


# -- 5: a descriptor key given twice -------------------------------------------------------------

@pytest.mark.parametrize("pairs", [
    [("model", "resnet50"), ("bs", "64"), ("bs", "32")],
    [("model", "resnet50"), ("bs", "64"), ("batch_size", "32")],
])
def test_a_key_given_twice_is_refused(pairs: list[tuple[str, object]]) -> None:
    with pytest.raises(DescriptorError, match=rf"^{pairs[2][0]}: given twice"):
        WorkloadDescriptor.from_pairs(pairs)
    assert WorkloadDescriptor.from_pairs(pairs[:2]) == WorkloadDescriptor(model="resnet50", batch_size=64)


def test_predict_spec_takes_a_json_object_as_descriptor_files_do(capsys: Capsys) -> None:
    """hsbatch --hase-descriptor takes a plain JSON object; --spec '{"model":"resnet50"}' failed
    with 'expected key=value'."""
    as_json = _main(["model", "predict", "--spec", '{"model": "resnet50", "bs": 64}',
                     "--gpu", "a100", "--json"], capsys)
    as_pairs = _main(["model", "predict", "--spec", "model=resnet50 bs=64", "--gpu", "a100",
                      "--json"], capsys)
    assert as_json[0] == 0 and as_json[1] == as_pairs[1]
    code, _out, err = _main(["model", "predict", "--spec", '{"model": '], capsys)
    assert code == 2 and "--spec: not valid JSON" in err
