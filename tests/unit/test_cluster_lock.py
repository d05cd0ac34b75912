"""services.exclusive: one `hase cluster up`/`down` at a time."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from slurm_hase.errors import ClusterError
from slurm_hase.slurm.localcluster.services import exclusive


def test_a_second_holder_waits_for_the_first(tmp_path: Path) -> None:
    lock = tmp_path / "sub" / "cluster.lock"
    order: list[str] = []

    def second() -> None:
        with exclusive(lock, timeout_s=10):
            order.append("second")

    with exclusive(lock):
        t = threading.Thread(target=second)
        t.start()
        time.sleep(0.5)
        order.append("first done")
    t.join(10)
    assert order == ["first done", "second"]


def test_a_holder_that_never_lets_go_gives_a_clear_error(tmp_path: Path) -> None:
    lock = tmp_path / "cluster.lock"
    with (exclusive(lock), pytest.raises(ClusterError, match="another 'hase cluster' command"),
          exclusive(lock, timeout_s=0.3)):
        pass
    with exclusive(lock, timeout_s=0.3):  # released after the error
        pass
