"""`hase simulate` says so where an option or a cluster file's table would do nothing:
--gpus beside --cluster (refused), [[accounts]] that match none or only some of the trace's
accounts (a warning)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_sim_bad_input import _hase, _sim_args
from tests.unit.test_sim_cli import _data_dir


@pytest.fixture()
def data(tmp_path: Path, fixtures_dir: Path) -> Path:
    return _data_dir(tmp_path, fixtures_dir)


CLUSTER = """
[[nodes]]
name = "k"
count = 4
gpus = 4
gpu_type = "k80"

[[nodes]]
name = "v"
count = 4
gpus = 4
gpu_type = "v100"
"""


def test_gpus_beside_cluster_is_refused_before_any_work(
        tmp_path: Path, fixtures_dir: Path, data: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "c.toml"
    spec.write_text(CLUSTER)
    out = tmp_path / "out"
    code, err = _hase(_sim_args(fixtures_dir, data, out, "--cluster", str(spec), "--gpus",
                                "k80=4"), capsys)
    assert code == 2 and not out.exists()
    assert err == ("hase: error: --gpus with --cluster: the cluster file names every GPU, so "
                   "--gpus would be ignored; give one of the two\n")
    code, _ = _hase(_sim_args(fixtures_dir, data, out, "--cluster", str(spec)), capsys)
    assert code == 0  # the cluster file alone runs


def test_accounts_matching_no_trace_account_are_warned_about(
        tmp_path: Path, fixtures_dir: Path, data: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "c.toml"
    spec.write_text(CLUSTER + '[[accounts]]\nname = "teama"\nshares = 60\n'
                              '[[accounts]]\nname = "teamb"\nshares = 40\n')
    code, err = _hase(_sim_args(fixtures_dir, data, tmp_path / "o1", "--cluster", str(spec)),
                      capsys)
    assert code == 0
    assert ("hase: warning: the cluster file's [[accounts]] (teama, teamb) match none of the "
            "trace's accounts (acct0, acct1, acct2, acct3): every account gets share 1\n") in err
    # some named: the others get share 1 beside them, which starves them if the shares are large
    spec.write_text(CLUSTER + '[[accounts]]\nname = "acct0"\nshares = 3\n')
    code, err = _hase(_sim_args(fixtures_dir, data, tmp_path / "o2", "--cluster", str(spec)),
                      capsys)
    assert code == 0
    assert ("hase: warning: 3 of the trace's 4 accounts have no [[accounts]] entry in the "
            "cluster file (acct1, acct2, acct3): each gets share 1, beside the shares given to "
            "acct0\n") in err
    spec.write_text(CLUSTER + "".join(f'[[accounts]]\nname = "acct{i}"\nshares = {i + 1}\n'
                                      for i in range(4)))
    code, err = _hase(_sim_args(fixtures_dir, data, tmp_path / "o3", "--cluster", str(spec)),
                      capsys)
    assert code == 0 and "[[accounts]]" not in err
