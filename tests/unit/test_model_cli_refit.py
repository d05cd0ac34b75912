"""`hase model refit`: the plausibility filter against the model in use, and no model from 0 rows."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from slurm_hase.errors import PredictorError
from slurm_hase.predict.dataset import Measurement, read_csv
from slurm_hase.predict.descriptor import WorkloadDescriptor
from slurm_hase.predict.modelfile import load_predictor
from slurm_hase.predict.refit import IMPLAUSIBLE, MAX_RATIO, drop_implausible, harvest, refit
from slurm_hase.slurm.types import AccountingRecord, JobState
from tests.conftest import run_main as _main

ITERS = 2000



@pytest.fixture(scope="module")
def rows(fixtures_dir: Path) -> list[Measurement]:
    """Real exclusive single-GPU training rows (Gavel) from the small fixture."""
    return [m for m in read_csv(fixtures_dir / "predict" / "measurements_small.csv")
            if not m.desc.corunner_gflops and m.desc.num_gpus == 1 and m.desc.mode == "train"]


def _record(job_id: str, m: Measurement, scale: float = 1.0) -> AccountingRecord:
    """A real measured row replayed as a finished job (elapsed = time x iterations); ``scale``
    derives an implausible job from it (e.g. 1/100: the same job reported 100x too fast)."""
    desc = WorkloadDescriptor(model=m.desc.model, gflops_per_iter=m.desc.gflops_per_iter,
                              batch_size=m.desc.batch_size, iterations=ITERS)
    return AccountingRecord(job_id=job_id, name="j", account="a", user="u", state=JobState.COMPLETED,
                            elapsed_s=round(m.iter_time_s * scale * ITERS), alloc_gpus={m.gpu: 1},
                            comment=desc.to_comment())


def test_rows_far_off_the_model_in_use_are_skipped(rows: list[Measurement]) -> None:
    shipped = load_predictor()
    real = rows[:8]
    # derived, implausible: the first two real rows with their time divided by 100, the third
    # with it multiplied by 100 (as a sleep job or a wrong iteration count would report them)
    recs = [_record(str(i), m) for i, m in enumerate(real)]
    recs += [_record("fast0", real[0], 1 / 100), _record("fast1", real[1], 1 / 100),
             _record("slow2", real[2], 100)]
    got = harvest(recs, shipped)
    assert [m.source for m in got.rows] == [f"site:sacct:{i}" for i in range(len(real))]
    assert got.skipped == {IMPLAUSIBLE: 3} and got.implausible == 3 and got.max_ratio == MAX_RATIO
    assert got.worst is not None and got.worst.ratio > 50
    assert got.worst.row.source in ("site:sacct:fast0", "site:sacct:fast1", "site:sacct:slow2")
    assert "x faster" in got.worst.describe() or "x slower" in got.worst.describe()
    # without a reference model nothing is filtered (the library default stays as it was)
    assert len(harvest(recs).rows) == len(recs)
    # a looser bound keeps them; a bound of 1 or less is refused
    assert drop_implausible(harvest(recs), shipped, max_ratio=1e6).implausible == 0
    with pytest.raises(PredictorError, match="above 1"):
        drop_implausible(harvest(recs), shipped, max_ratio=1.0)


def test_refit_refuses_zero_rows(rows: list[Measurement]) -> None:
    got = harvest([AccountingRecord(job_id="1", name="j", account="a", user="u", state=JobState.FAILED)])
    with pytest.raises(PredictorError, match=r"\(skipped not completed: 1\); model unchanged"):
        got.require_rows()
    with pytest.raises(PredictorError, match="no site rows"):
        refit(rows, [])


def _sacct_json(fixtures_dir: Path, jobs: list[tuple[str, dict[str, Any] | None, int]]) -> str:
    """The captured 24.11 `sacct --json` (test cluster) with jobs cloned from its completed a100
    job 1: (GPU type, descriptor or None, elapsed seconds) each."""
    doc = json.loads((fixtures_dir / "slurm" / "24.11" / "sacct.json").read_text())
    template = next(j for j in doc["jobs"] if j["job_id"] == 1)
    out = []
    for n, (gpu, desc, elapsed) in enumerate(jobs, 1):
        job = copy.deepcopy(template)
        job["job_id"] = 1000 + n
        job["comment"]["job"] = json.dumps({"hase": 1, **desc}) if desc else ""
        job["time"]["elapsed"] = elapsed
        for t in job["tres"]["allocated"]:
            if t["name"].startswith("gpu:"):
                t["name"] = f"gpu:{gpu}"
        out.append(job)
    doc["jobs"] = out
    return json.dumps(doc)


def test_cli_sleep_job_alone_gives_no_model(
    tmp_path: Path, fixtures_dir: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    # the audit's case: the test cluster's job 1 really ran 1 s on an a100 (a sleep); with a
    # ResNet-50 bs64 descriptor of 370 iterations that reads 2.7 ms/iteration, ~45x faster than
    # the shipped model's P50 (0.123 s since session 22)
    shipped = load_predictor().predict(WorkloadDescriptor(model="resnet50", batch_size=64), ["a100"])
    times_faster = round(shipped["a100"].iter_time_p50 / (1 / 370))
    assert times_faster > 10  # refit's threshold
    doc = json.loads((fixtures_dir / "slurm" / "24.11" / "sacct.json").read_text())
    job1 = next(j for j in doc["jobs"] if j["job_id"] == 1)
    assert job1["time"]["elapsed"] == 1
    job1["comment"]["job"] = '{"hase":1,"model":"resnet50","bs":64,"iters":370}'
    sacct = tmp_path / "sacct.json"
    sacct.write_text(json.dumps(doc))
    out, saved = tmp_path / "r.json", tmp_path / "rows.csv"
    out.write_text("the old model")
    small = str(fixtures_dir / "predict" / "measurements_small.csv")
    code, stdout, err = _main(["model", "refit", "--data", small, "--sacct-json", str(sacct),
                               "--out", str(out), "--save-rows", str(saved)], capsys)
    assert code == 1
    assert "harvested 0 jobs" in stdout and f"{IMPLAUSIBLE}: 1" in stdout
    assert "dropped 1 implausible row(s), more than 10x" in err and f"{times_faster}x faster" in err
    assert "hase: error: no usable finished jobs" in err and "model unchanged" in err
    assert "no descriptor: 2" in err and "not completed: 8" in err
    assert out.read_text() == "the old model" and not saved.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "sacct.json"]
    # the captured file as it is (no descriptors at all): the same refusal
    code, _o, err = _main(["model", "refit", "--data", small, "--out", str(out), "--sacct-json",
                           str(fixtures_dir / "slurm" / "24.11" / "sacct.json")], capsys)
    assert code == 1 and "no descriptor: 3, not completed: 8" in err
    assert out.read_text() == "the old model"


def test_cli_refit_keeps_plausible_rows_and_honours_max_ratio(
    tmp_path: Path, fixtures_dir: Path, rows: list[Measurement], capsys: pytest.CaptureFixture[str],
) -> None:
    real = rows[:6]
    jobs: list[tuple[str, dict[str, Any] | None, int]] = [
        (m.gpu, {"model": m.desc.model, "bs": m.desc.batch_size, "iters": ITERS}, round(m.iter_time_s * ITERS))
        for m in real]
    # derived, implausible: the first real row again with its time divided by 100
    jobs.append((real[0].gpu, {"model": real[0].desc.model, "bs": real[0].desc.batch_size, "iters": ITERS},
                 round(real[0].iter_time_s * ITERS / 100)))
    sacct = tmp_path / "sacct.json"
    sacct.write_text(_sacct_json(fixtures_dir, jobs))
    small = str(fixtures_dir / "predict" / "measurements_small.csv")
    out, saved = tmp_path / "r.json", tmp_path / "rows.csv"
    code, stdout, err = _main(["model", "refit", "--data", small, "--sacct-json", str(sacct),
                               "--out", str(out), "--save-rows", str(saved)], capsys)
    assert code == 0, err
    assert f"harvested {len(real)} jobs" in stdout and f"{IMPLAUSIBLE}: 1" in stdout
    assert "dropped 1 implausible row(s)" in err and "site:sacct:1007" in err
    kept = read_csv(saved)
    assert [m.source for m in kept] == [f"site:sacct:{1001 + i}" for i in range(len(real))]
    assert load_predictor(out).meta["rows"] == 426 + len(real)
    # --max-ratio 1000 lets the derived row in; a ratio of 1 or less is a usage error
    code, stdout, err = _main(["model", "refit", "--data", small, "--sacct-json", str(sacct),
                               "--out", str(out), "--max-ratio", "1000"], capsys)
    assert code == 0 and f"harvested {len(jobs)} jobs" in stdout and "implausible" not in err
    code, _o, err = _main(["model", "refit", "--data", small, "--sacct-json", str(sacct),
                           "--out", str(out), "--max-ratio", "1"], capsys)
    assert code == 2 and "--max-ratio" in err


def test_cli_default_max_ratio_is_the_library_default() -> None:
    from slurm_hase.cli.model_cmd import refit_cmd

    opt = next(p for p in refit_cmd.params if p.name == "max_ratio")
    assert opt.default == MAX_RATIO
