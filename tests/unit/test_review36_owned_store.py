"""The store's ownership rows equal the daemon's in-memory map after every write, values going
back to None included (a refused update restores an entry with no Nice or no Features)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from slurm_hase.daemon.cycle import CycleConfig, JobEstimate
from slurm_hase.daemon.fake import FakeBackend, gpu_node
from slurm_hase.daemon.loop import Daemon, LoopSettings
from slurm_hase.daemon.safety import OwnedAttrs
from slurm_hase.errors import SlurmCommandError, SlurmUnavailableError
from slurm_hase.policy.types import ClusterState, Decision
from slurm_hase.slurm.types import GpuRequest, Job, JobState
from slurm_hase.store.state import StateStore

CKPT = '{"hase":1,"model":"resnet50","ckpt":1}'


class Clock:
    def now(self) -> float:
        return 10_000.0


class Est:
    def estimate(self, job: Job, gpu_types: Sequence[str]) -> JobEstimate:
        return JobEstimate({t: 500.0 for t in gpu_types}, checkpoint=True)


class Pol:
    name, summary = "p", ""

    def __init__(self, decide: Callable[[ClusterState], list[Decision]]) -> None:
        self.decide = decide


def pending(job_id: str, **kw: object) -> Job:
    return Job(job_id=job_id, name="j", user="u", account="a", partition="gpu",
               state=JobState.PENDING, gpu=GpuRequest(1, None, "job"), **kw)  # type: ignore[arg-type]


def reloaded(path: Path) -> dict[str, OwnedAttrs]:
    """The owned map a restarted daemon loads (Daemon.__init__)."""
    store = StateStore(path)
    try:
        return {jid: OwnedAttrs(*row) for jid, row in store.owned_rows().items()}
    finally:
        store.close()


def daemon(tmp_path: Path, fb: FakeBackend, decide: Callable[[ClusterState], list[Decision]],
           config: CycleConfig | None = None) -> tuple[Daemon, StateStore]:
    store = StateStore(tmp_path / "s.db")
    d = Daemon(fb, Pol(decide), Est(), Clock(), store, config or CycleConfig(refresh_s=0),
               LoopSettings(), shares={"a": 1.0})
    return d, store


def test_a_refused_nice_update_leaves_no_nice_owned_after_a_restart(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The daemon owns only job 1's Features. A Nice update is recorded as intended (written
    ahead to the store), then refused: the entry goes back to no Nice in memory, but the store
    kept Nice 40 (COALESCE), so after a restart the daemon took the user's Nice 40 for its own."""
    caplog.set_level(logging.CRITICAL)
    fb = FakeBackend([pending("1", features="a100")], [gpu_node("a1", "a100")])
    setup = StateStore(tmp_path / "s.db")
    setup.save_owned({"1": (None, "a100", None, None)})
    setup.close()
    fb.fail_updates["1"] = SlurmCommandError(["scontrol", "update"], 1, "Access/permission denied")
    d, store = daemon(tmp_path, fb, lambda s: [Decision(p.job_id, nice=40) for p in s.pending])
    d.step()
    assert d.last_result is not None and [j for j, _ in d.last_result.errors] == ["1"]
    assert d.owned == {"1": OwnedAttrs(nice=None, features="a100")}
    store.close()
    after = reloaded(tmp_path / "s.db")
    assert after == d.owned
    assert not after["1"].owns_nice(40)


def test_a_refused_features_update_leaves_no_features_owned_after_a_restart(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The same for Features: the daemon owns only a Nice; a Features update is refused."""
    caplog.set_level(logging.CRITICAL)
    fb = FakeBackend([pending("1", nice=40)], [gpu_node("a1", "a100")])
    setup = StateStore(tmp_path / "s.db")
    setup.save_owned({"1": (40, None, None, None)})
    setup.close()
    fb.fail_updates["1"] = SlurmCommandError(["scontrol", "update"], 1, "Invalid feature")
    d, store = daemon(tmp_path, fb,
                      lambda s: [Decision(p.job_id, gpu_types=("a100",)) for p in s.pending])
    d.step()
    assert d.owned == {"1": OwnedAttrs(nice=40, features=None)}
    store.close()
    assert reloaded(tmp_path / "s.db") == d.owned


def test_a_requeued_jobs_update_of_unknown_outcome_is_in_the_store(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A requeue lands, slurmctld goes away during the update after it: the daemon keeps the
    Nice it may have set as its own; the store must know it too (it did not: the job was
    neither planned nor applied, so its row was never written)."""
    caplog.set_level(logging.CRITICAL)
    job = Job(job_id="7", name="train", user="u", account="a", partition="gpu",
              state=JobState.RUNNING, gpu=GpuRequest(1, None, "job"), alloc_gpus={"v100": 1},
              start_time=1000, time_limit_s=100_000, comment=CKPT, requeue=True)
    fb = FakeBackend([job], [gpu_node("v1", "v100", alloc=1)])
    fb.fail_updates["7"] = SlurmUnavailableError(["scontrol"], 1, "Unable to contact slurm")
    d, store = daemon(tmp_path, fb, lambda s: [Decision("7", nice=500, requeue=True)],
                      CycleConfig(requeue=True, refresh_s=0))
    d.step()
    assert d.last_result is not None and d.last_result.requeued == ["7"]
    assert d.owned["7"].owns_nice(500)
    store.close()
    assert reloaded(tmp_path / "s.db") == d.owned


def test_full_rows_replace_and_partial_rows_keep() -> None:
    """A 4-tuple is the whole row (None clears); a 2-tuple keeps what it leaves as None."""
    st = StateStore(":memory:")
    st.save_owned({"1": (40, "a100", 20, "v100")})
    st.save_owned({"1": (None, "a100", None, None)})
    assert st.owned_rows() == {"1": (None, "a100", None, None)}
    st.save_owned({"1": (40, None)})
    assert st.owned_rows() == {"1": (40, "a100", None, None)}
