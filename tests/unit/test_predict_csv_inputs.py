"""Site measurement CSVs as spreadsheets save them: a byte-order mark, a bad co-runner cell."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hase.errors import DataError
from slurm_hase.predict.dataset import read_csv
from tests.conftest import run_main as _main


@pytest.fixture()
def bom_csv(tmp_path: Path, fixtures_dir: Path) -> Path:
    """The real fixture as a spreadsheet's "CSV UTF-8" export writes it: with a BOM first."""
    text = (fixtures_dir / "predict" / "measurements_small.csv").read_text(encoding="utf-8")
    path = tmp_path / "site.csv"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    return path


def test_a_csv_with_a_byte_order_mark_reads_as_without(bom_csv: Path, fixtures_dir: Path) -> None:
    plain = read_csv(fixtures_dir / "predict" / "measurements_small.csv")
    assert read_csv(bom_csv) == plain


def test_evaluate_takes_a_csv_with_a_byte_order_mark(
    bom_csv: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = _main(["model", "evaluate", "--data", str(bom_csv), "--model", "shipped"], capsys)
    assert code == 0, err
    assert "missing required column" not in err and out.startswith("model: rows=426 ")


def test_a_bad_corunner_cell_names_its_column_and_row(tmp_path: Path, fixtures_dir: Path) -> None:
    lines = (fixtures_dir / "predict" / "measurements_small.csv").read_text(encoding="utf-8").splitlines()
    row = next(i for i, line in enumerate(lines[1:], 1) if line.split(",")[8])  # a real co-located row
    cells = lines[row].split(",")
    cells[8] += ";n/a"  # a second co-runner typed as a spreadsheet leaves an unknown value
    lines[row] = ",".join(cells)
    path = tmp_path / "site.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=rf"site.csv: row {row + 1}: corunner_gflops: 'n/a' is not a number$"):
        read_csv(path)
