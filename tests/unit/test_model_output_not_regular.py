"""`hase model` outputs are renamed into place, so a device or pipe at the output path must be
refused, never replaced by a plain file (as root, `--out /dev/null` used to replace /dev/null)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from slurm_hase.errors import DataError, PredictorError
from slurm_hase.predict.dataset import read_csv, write_csv
from slurm_hase.predict.modelfile import load_predictor, save_model
from tests.conftest import run_main as _main


def _fifo(tmp_path: Path, name: str) -> Path:
    """A named pipe: a non-regular file any user can make (as /dev/stdout often is)."""
    path = tmp_path / name
    os.mkfifo(path)
    return path


def test_train_refuses_a_pipe_as_output_before_training(
    tmp_path: Path, fixtures_dir: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    # (--registry, checked the same way, is not tried on a pipe here: before the check SQLite
    # blocked forever opening it, so a regression would hang the suite instead of failing)
    pipe = _fifo(tmp_path, "pipe")
    argv = ["model", "train", "--data", str(fixtures_dir / "predict" / "measurements_small.csv"),
            "--out", str(pipe)]
    code, _out, err = _main(argv, capsys)
    assert code == 2, err
    assert "--out" in err and "not a regular file" in err
    assert stat.S_ISFIFO(pipe.stat().st_mode)  # still the pipe
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]  # nothing staged or written


def test_export_data_refuses_a_pipe(tmp_path: Path, shared_data: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    pipe = _fifo(tmp_path, "rows.csv")
    code, _out, err = _main(["model", "export-data", "--shared", str(shared_data), "--out", str(pipe)],
                            capsys)
    assert code == 2 and "not a regular file" in err
    assert stat.S_ISFIFO(pipe.stat().st_mode)


def test_library_writers_refuse_a_pipe_and_leave_it(tmp_path: Path, fixtures_dir: Path) -> None:
    rows = read_csv(fixtures_dir / "predict" / "measurements_small.csv")
    pipe = _fifo(tmp_path, "out")
    with pytest.raises(PredictorError, match="not a regular file"):
        save_model(load_predictor(), pipe)
    with pytest.raises(DataError, match="not a regular file"):
        write_csv(rows, pipe)
    assert stat.S_ISFIFO(pipe.stat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
