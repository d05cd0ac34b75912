"""Daemon loop: recording, back-off while slurmctld is away, resume, metrics, reset."""

from __future__ import annotations

import json
import logging
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import pytest

from slurm_hase.daemon.cycle import CycleConfig, JobEstimate, OwnedAttrs
from slurm_hase.daemon.fake import FakeBackend, gpu_node
from slurm_hase.daemon.logs import JsonFormatter
from slurm_hase.daemon.loop import Daemon, LoopSettings
from slurm_hase.daemon.metrics import Metrics, serve_metrics
from slurm_hase.daemon.reset import reset_decisions
from slurm_hase.policy.types import ClusterState, Decision
from slurm_hase.slurm.types import GpuRequest, Job, JobState, JobUpdate, SchedulerDepths
from slurm_hase.store.state import StateStore
from tests.unit.test_daemon_cycle import Clock


class Est:
    def estimate(self, job: Job, gpu_types: Sequence[str]) -> JobEstimate | None:
        return JobEstimate({t: 100.0 for t in gpu_types})


class NiceEverything:
    name = "nice"
    summary = "sets nice 40 and a100 on every pending job"

    def decide(self, state: ClusterState) -> list[Decision]:
        return [Decision(p.job_id, nice=40, gpu_types=("a100",)) for p in state.pending]


def pjob(jid: str, **kw: object) -> Job:
    return Job(job_id=jid, name="j", user="u", account="a", partition="gpu",
               state=JobState.PENDING, gpu=GpuRequest(1, None, "job"), **kw)  # type: ignore[arg-type]


def make(tmp_path: Path, fb: FakeBackend, dry: bool = False,
         refresh_s: float = 600.0) -> tuple[Daemon, StateStore]:
    store = StateStore(tmp_path / "s.db")
    d = Daemon(fb, NiceEverything(), Est(), Clock(), store,
               CycleConfig(dry_run=dry, refresh_s=refresh_s),
               LoopSettings(interval_s=30, backoff_s=2, backoff_max_s=10, half_life_s=60),
               shares={"a": 1.0})
    return d, store


def test_records_cycle_decisions_and_ownership(tmp_path: Path) -> None:
    fb = FakeBackend([pjob("1"), pjob("2")], [gpu_node("a1", "a100")])
    d, store = make(tmp_path, fb)
    assert d.step() <= 30
    (cyc,) = store.cycles()
    assert cyc["applied"] == 2 and cyc["policy"] == "nice"
    rows = store.decisions()
    assert [(r["job_id"], r["outcome"], r["nice"], r["features"]) for r in rows] == [
        ("1", "applied", 40, "a100"), ("2", "applied", 40, "a100")]
    assert store.owned() == {"1": (40, "a100"), "2": (40, "a100")}
    assert store.latest_usage() is not None
    d.step()  # nothing changed -> no updates, nothing new recorded per job
    assert len(fb.updates) == 2 and len(store.decisions()) == 2
    # job 2 starts: it still carries what the daemon set (a requeue brings it back with it)
    fb.job_list[1] = Job(job_id="2", name="j", user="u", account="a", partition="gpu",
                         state=JobState.RUNNING, alloc_gpus={"a100": 1})
    d.step()
    assert set(store.owned()) == {"1", "2"}
    # job 2 ends and leaves squeue: its ownership record is dropped
    del fb.job_list[1]
    d.step()
    assert set(store.owned()) == {"1"}
    # a restarted daemon knows what it owns
    d2 = Daemon(fb, NiceEverything(), Est(), Clock(), store, CycleConfig(), d.settings)
    assert d2.owned == {"1": OwnedAttrs(40, "a100")}


def test_quiet_cycles_are_counted_not_recorded(tmp_path: Path) -> None:
    fb = FakeBackend([pjob("1"), pjob("2")], [gpu_node("a1", "a100")])
    store = StateStore(tmp_path / "s.db")
    d = Daemon(fb, NiceEverything(), Est(), Clock(), store, CycleConfig(refresh_s=600.0),
               LoopSettings(interval_s=30, half_life_s=60), shares={"a": 1.0})
    d.step()
    assert d.step() <= 30 and d.last_result is not None and d.last_result.quiet
    assert len(store.cycles()) == 1 and len(fb.updates) == 2
    text = d.metrics.render()
    assert 'hase_schedd_cycles_total{outcome="quiet"} 1' in text
    assert 'hase_schedd_cycles_total{outcome="ok"} 1' in text
    fb.job_list.append(pjob("3"))  # a new job: the next cycle decides and records
    d.step()
    assert len(store.cycles()) == 2 and len(fb.updates) == 3


class SeesDepth:
    name = "depth"
    summary = "records the scheduler depth its state carries"

    def __init__(self) -> None:
        self.seen: list[int] = []

    def decide(self, state: ClusterState) -> list[Decision]:
        self.seen.append(state.scheduler_depth)
        return []


def test_reads_slurms_scheduler_depth_once_and_hands_it_to_the_policy(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    fb = FakeBackend([pjob("1")], [gpu_node("a1", "a100")])
    fb.depths = SchedulerDepths(backfill=5000, main=250)
    pol = SeesDepth()
    settings = LoopSettings(interval_s=30, half_life_s=60)
    d = Daemon(fb, pol, Est(), Clock(), StateStore(tmp_path / "s.db"),
               CycleConfig(refresh_s=0.0), settings, shares={"a": 1.0})  # every cycle decides
    d.step()
    d.step()
    assert pol.seen == [5000, 5000]
    # slurmctld down at start: Slurm's defaults, said in the log; the daemon still starts
    fb.unavailable = True
    with caplog.at_level(logging.WARNING, logger="slurm_hase.daemon"):
        d2 = Daemon(fb, pol, Est(), Clock(), StateStore(tmp_path / "s2.db"), CycleConfig(),
                    settings, shares={"a": 1.0})
    assert d2.config.scheduler_depth == 500 and "SchedulerParameters" in caplog.text
    # an explicit depth in the cycle config is kept, and Slurm is not asked
    fb.unavailable = False

    def not_asked() -> SchedulerDepths:
        raise AssertionError("scheduler_depths() called although the config sets the depth")

    fb.scheduler_depths = not_asked  # type: ignore[method-assign]
    d3 = Daemon(fb, pol, Est(), Clock(), StateStore(tmp_path / "s3.db"),
                CycleConfig(scheduler_depth=42), settings, shares={"a": 1.0})
    assert d3.config.scheduler_depth == 42


def test_dry_run_records_planned_only(tmp_path: Path) -> None:
    fb = FakeBackend([pjob("1")], [gpu_node("a1", "a100")])
    d, store = make(tmp_path, fb, dry=True)
    d.step()
    assert fb.updates == [] and store.owned() == {}
    assert [r["outcome"] for r in store.decisions()] == ["planned"]


def test_backs_off_while_slurmctld_is_down_then_resumes(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    fb = FakeBackend([pjob("1")], [gpu_node("a1", "a100")])
    d, store = make(tmp_path, fb)
    fb.unavailable = True
    with caplog.at_level(logging.WARNING, logger="slurm_hase.daemon"):
        delays = [d.step() for _ in range(5)]
    assert delays == [2, 4, 8, 10, 10]  # exponential, capped
    assert "backing off" in caplog.text and store.cycles() == []
    assert d.metrics.get("hase_schedd_errors_total", kind="slurm") == 5
    fb.unavailable = False
    assert d.step() <= 30 and d.failures == 0
    assert fb.updates == [("1", JobUpdate(nice=40, features="a100"))]
    assert d.metrics.get("hase_schedd_backoff_seconds") == 0


def test_cycle_that_loses_slurmctld_while_acting_is_counted_once(tmp_path: Path) -> None:
    """cycles_total counts cycles run, by outcome: one that observed and then lost slurmctld
    while sending its updates is one "unavailable" cycle, not also an "error" one."""
    fb = FakeBackend([pjob("1")], [gpu_node("a1", "a100")])
    d, _ = make(tmp_path, fb)

    def gone(job_id: str) -> None:
        fb.unavailable = True

    fb.before_update = gone
    assert d.step() == 2 and d.failures == 1  # backs off
    assert d.metrics.get("hase_schedd_cycles_total", outcome="unavailable") == 1
    assert d.metrics.get("hase_schedd_cycles_total", outcome="error") == 0
    assert d.metrics.get("hase_schedd_errors_total", kind="slurm") == 1
    d.step()  # slurmctld still away: observing fails, an "error" cycle
    assert d.metrics.get("hase_schedd_cycles_total", outcome="error") == 1


def test_job_that_left_the_managed_partitions_gets_its_attributes_back(tmp_path: Path) -> None:
    """The daemon manages partition gpu. Job 2 got our Nice and Features there and was then
    moved to debug (or the config dropped its partition): the daemon puts them back as reset
    would, instead of forgetting a Nice that still orders it where the daemon no longer looks.
    A put-back that does not land is kept and tried again."""
    moved = Job(job_id="2", name="j", user="u", account="a", partition="debug",
                state=JobState.PENDING, gpu=GpuRequest(1, None, "job"), nice=40, features="a100")
    other = Job(job_id="3", name="j", user="u", account="a", partition="debug",
                state=JobState.PENDING, gpu=GpuRequest(1, None, "job"), nice=7)  # never ours
    fb = FakeBackend([pjob("1"), moved, other], [gpu_node("a1", "a100")])
    store = StateStore(tmp_path / "s.db")
    store.save_owned({"2": (40, "a100")})
    config = CycleConfig(partitions=("gpu",))
    settings = LoopSettings(interval_s=30, backoff_s=2, backoff_max_s=10, half_life_s=60)
    d = Daemon(fb, NiceEverything(), Est(), Clock(), store, config, settings, shares={"a": 1.0})

    def lose_slurmctld(job_id: str) -> None:
        if job_id == "2":
            fb.unavailable = True

    fb.before_update = lose_slurmctld
    d.step()
    assert [j for j, _ in fb.updates] == ["1"] and "2" in d.owned and "2" in store.owned()
    fb.before_update, fb.unavailable = None, False
    d.step()
    assert fb.updates[-1] == ("2", JobUpdate(nice=0, features=""))
    assert "2" not in d.owned and set(store.owned()) == {"1"}
    assert "3" not in [j for j, _ in fb.updates]
    row = [r for r in store.decisions() if r["job_id"] == "2"][-1]
    assert row["outcome"] == "applied" and "left the managed partitions (now in debug)" in row["reason"]


def test_running_job_outside_the_managed_partitions_stays_owned_until_it_pends_again(
        tmp_path: Path) -> None:
    """Job 2 got our Nice and Features while it waited in partition gpu, then started there;
    a config reload dropped gpu from `partitions`. While it runs outside them the daemon keeps
    owning what it set (before: forgotten at once), so when Slurm requeues it into the
    unmanaged partition the daemon puts them back (before: they stayed on it for good)."""
    running = Job(job_id="2", name="j", user="u", account="a", partition="debug",
                  state=JobState.RUNNING, gpu=GpuRequest(1, None, "job"), nice=40,
                  features="a100", start_time=0, alloc_gpus={"a100": 1}, nodes="a1")
    fb = FakeBackend([pjob("1"), running], [gpu_node("a1", "a100")])
    store = StateStore(tmp_path / "s.db")
    store.save_owned({"2": (40, "a100")})
    settings = LoopSettings(interval_s=30, backoff_s=2, backoff_max_s=10, half_life_s=60)
    d = Daemon(fb, NiceEverything(), Est(), Clock(), store, CycleConfig(partitions=("gpu",)),
               settings, shares={"a": 1.0})
    d.step()
    assert "2" in d.owned and "2" in store.owned()
    assert "2" not in [j for j, _ in fb.updates]  # running: nothing to put back yet
    fb.job_list[1] = Job(job_id="2", name="j", user="u", account="a", partition="debug",
                          state=JobState.PENDING, gpu=GpuRequest(1, None, "job"), nice=40,
                          features="a100", restarts=1)
    d.step()
    assert fb.updates[-1] == ("2", JobUpdate(nice=0, features=""))
    assert "2" not in d.owned and "2" not in store.owned()
    fb.job_list.pop(1)  # and a job that is gone from squeue is forgotten as before
    d.step()
    assert "2" not in d.owned


def test_run_loop_sleeps_and_stops(tmp_path: Path) -> None:
    fb = FakeBackend([pjob("1")], [gpu_node("a1", "a100")])
    d, store = make(tmp_path, fb, refresh_s=0.0)  # every cycle decides and is recorded
    slept: list[float] = []
    d.run(should_stop=lambda: len(slept) >= 45, sleep=slept.append)
    assert len(store.cycles()) == 2  # 30 s interval, sleeping 1 s at a time
    d.run(once=True, sleep=slept.append)
    assert len(store.cycles()) == 3


@pytest.mark.parametrize("dry", [False, True])
def test_store_locked_during_cycle_keeps_the_record(tmp_path: Path, dry: bool) -> None:
    """The cycle's record waits in the backlog while the store is locked; the next cycle
    writes it (a dry run's as well, though it writes no usage ledger). A real cycle sends
    nothing while the store cannot record it first (session 42: after a restart the daemon
    would read its own values as the user's), so the next cycle decides and sends it."""
    import sqlite3

    fb = FakeBackend([pjob("1")], [gpu_node("a1", "a100")])
    store = StateStore(tmp_path / "s.db", lock_timeout_s=0.01, attempts=2, sleep=lambda s: None)
    d = Daemon(fb, NiceEverything(), Est(), Clock(), store, CycleConfig(dry_run=dry),
               LoopSettings())
    other = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    d.step()  # cycle planned, nothing sent; its record waits in the backlog
    assert store.backlog and fb.updates == []
    if dry:
        other.execute("ROLLBACK")
        d.step()
        assert d.last_result is not None and d.last_result.quiet
        assert store.backlog == [] and len(store.cycles()) == 1 and store.latest_usage() is None
        return
    assert d.metrics.get("hase_schedd_errors_total", kind="store") >= 1
    assert d.last_result is not None and d.last_result.not_recorded
    other.execute("ROLLBACK")
    d.step()  # not quiet: the last cycle sent nothing; it writes what was kept, then sends
    assert d.last_result is not None and not d.last_result.quiet
    assert fb.updates and store.backlog == [] and len(store.cycles()) == 2
    assert store.owned() == {"1": (40, "a100")} and store.latest_usage() is not None
    d.step()  # nothing changed since: quiet
    assert d.last_result is not None and d.last_result.quiet


def test_metrics_text_textfile_and_http(tmp_path: Path) -> None:
    fb = FakeBackend([pjob("1"), pjob("2", features="t4")], [gpu_node("a1", "a100")])
    d, _ = make(tmp_path, fb)
    d.step()
    text = d.metrics.render()
    assert 'hase_schedd_actions_total{kind="nice",outcome="applied"} 2' in text
    assert 'hase_schedd_actions_total{kind="features",outcome="applied"} 1' in text  # t4 is the user's
    assert 'hase_schedd_pending_jobs{gpu_type="t4"} 1' in text
    assert "# TYPE hase_schedd_cycle_duration_seconds gauge" in text
    out = tmp_path / "tf" / "hase.prom"
    d.metrics.write_textfile(out)
    assert out.read_text() == text
    m = Metrics()
    m.set("hase_schedd_running_jobs", 3)
    server = serve_metrics(m, "127.0.0.1", 0)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - local test server
            assert "hase_schedd_running_jobs 3" in resp.read().decode()
    finally:
        server.shutdown()


def test_json_logs_carry_fields() -> None:
    rec = logging.LogRecord("slurm_hase.daemon", logging.INFO, "f", 1, "cycle done", None, None)
    rec.pending = 7
    data = json.loads(JsonFormatter().format(rec))
    assert data["msg"] == "cycle done" and data["pending"] == 7 and data["level"] == "info"


def test_reset_removes_only_what_is_still_ours() -> None:
    jobs = [pjob("1", nice=40, features="a100"), pjob("2", nice=40, features="v100"),
            pjob("3", nice=5, features="t4"),
            Job(job_id="4", name="j", user="u", account="a", partition="gpu",
                state=JobState.RUNNING)]
    fb = FakeBackend(jobs, [])
    owned = {"1": OwnedAttrs(40, "a100"), "2": OwnedAttrs(40, "a100"),
             "3": OwnedAttrs(40, "a100"), "4": OwnedAttrs(40, None), "5": OwnedAttrs(1, None)}
    out = {o.job_id: o for o in reset_decisions(fb, owned)}
    assert out["1"].update == JobUpdate(nice=0, features="")
    assert out["2"].update == JobUpdate(nice=0)  # user re-constrained it: features kept
    assert out["3"].outcome == "unchanged"
    assert out["4"].outcome == "kept" and out["5"].outcome == "gone"
    assert fb.updates == [("1", JobUpdate(nice=0, features="")), ("2", JobUpdate(nice=0))]


def test_reset_puts_back_the_constraint_hsbatch_added() -> None:
    """hsbatch submitted job 21 with Features=a100|v100 ("at" in its description); the daemon
    set Features=a100. reset set Features= (none), and the job then ran on a t4, a type
    hsbatch had excluded: not "as if the daemon never ran"."""
    from slurm_hase.predict.descriptor import WorkloadDescriptor

    comment = WorkloadDescriptor(model="resnet50", batch_size=64, iterations=5000,
                                 auto_types=("a100", "v100")).to_comment()
    fb = FakeBackend([pjob("21", nice=40, features="a100", comment=comment),
                      pjob("22", nice=40, features="a100|v100", comment=comment),
                      pjob("23", nice=40, features="a100")], [])
    owned = {j: OwnedAttrs(40, "a100") for j in ("21", "22", "23")}
    out = {o.job_id: o for o in reset_decisions(fb, owned)}
    assert out["21"].update == JobUpdate(nice=0, features="a100|v100")
    assert out["22"].update == JobUpdate(nice=0)  # the user's (or hsbatch's) own: kept
    assert out["23"].update == JobUpdate(nice=0, features="")


def test_new_ledger_is_seeded_from_sacct_history(tmp_path: Path) -> None:
    from slurm_hase.slurm.types import AccountingRecord

    fb = FakeBackend([pjob("1")], [gpu_node("a1", "a100")])
    # Shapes of real sacct rows: a 2-GPU job of "heavy" that ended one half-life (60 s) ago and
    # ran 60 s; an MPS share of "light" (gres/mps=50) that ran the 60 s before that.
    fb.records = [
        AccountingRecord("7", "j", "heavy", "u", JobState.COMPLETED, start_time=880,
                         end_time=940, alloc_gpus={"a100": 2}),
        AccountingRecord("8", "j", "light", "u", JobState.COMPLETED, start_time=820, end_time=880,
                         alloc_tres={"gres/mps": "50"}),
        AccountingRecord("9", "j", "cpu", "u", JobState.COMPLETED, start_time=900, end_time=950),
    ]
    d, _ = make(tmp_path, fb)
    usage = d.ledger.usage()
    # 2 GPUs x integral of 2^-(1000-t)/60 over [880, 940] = 2 * 60/ln2 * (1/2 - 1/4)
    assert usage["heavy"] == pytest.approx(2 * 60 / 0.6931471805599453 * 0.25, rel=1e-9)
    assert usage["light"] == pytest.approx(0.5 * 60 / 0.6931471805599453 * 0.125, rel=1e-9)
    assert "cpu" not in usage


def _ledger_after(tmp_path: Path, sacct_down_at_start: bool) -> tuple[dict[str, float], int]:
    """Usage after three cycles 30 s apart, with a job running across the daemon's start."""
    from slurm_hase.slurm.types import AccountingRecord

    clock = Clock()
    running = Job(job_id="5", name="j", user="u", account="busy", partition="gpu",
                  state=JobState.RUNNING, start_time=900, alloc_gpus={"a100": 2},
                  gpu=GpuRequest(2, None, "job"))
    fb = FakeBackend([pjob("1"), running], [gpu_node("a1", "a100")])
    fb.records = [
        AccountingRecord("4", "j", "old", "u", JobState.COMPLETED, start_time=800, end_time=950,
                         alloc_gpus={"a100": 1}),
        AccountingRecord("5", "j", "busy", "u", JobState.RUNNING, start_time=900,
                         alloc_gpus={"a100": 2}),
    ]
    fb.accounting_down = sacct_down_at_start
    ticks = iter(range(0, 10**6, 700))  # monotonic seconds: each step may retry sacct
    store = StateStore(tmp_path / f"s{int(sacct_down_at_start)}.db")
    d = Daemon(fb, NiceEverything(), Est(), clock, store, CycleConfig(),
               LoopSettings(interval_s=30, backoff_s=2, backoff_max_s=10, half_life_s=60),
               shares={"a": 1.0}, monotonic=lambda: float(next(ticks)))
    calls = []
    for step in range(3):
        if step == 1:
            fb.accounting_down = False  # slurmdbd is back
        d.step()
        calls.append(d.ledger.usage().get("old", 0.0))
        clock.t += 30
    return d.ledger.usage(), sum(1 for c in calls if c == 0.0)


def test_history_sacct_could_not_give_at_start_is_added_once_it_answers(tmp_path: Path) -> None:
    """slurmdbd down when the daemon starts: the ledger starts from zero, and once sacct
    answers the service before the start is added, clipped there, so the ledger ends exactly
    as if it had been seeded at start (nothing counted twice, nothing lost)."""
    seeded, _ = _ledger_after(tmp_path, sacct_down_at_start=False)
    late, cycles_without_history = _ledger_after(tmp_path, sacct_down_at_start=True)
    assert cycles_without_history == 1  # only the first cycle ran without the history
    assert set(late) == set(seeded) == {"old", "busy"}
    for account, value in seeded.items():
        assert late[account] == pytest.approx(value, rel=1e-12)


def test_metrics_keep_full_precision() -> None:
    """`{value:g}` printed the cycle timestamp as 1.79631e+09 (up to ~5,000 s off: useless
    for the documented liveness alert) and rounded counters past 999,999."""
    m = Metrics()
    m.set("hase_schedd_last_cycle_timestamp_seconds", 1796313600.25)
    m.inc("hase_schedd_actions_total", 1234567, kind="nice")
    m.set("hase_schedd_cycle_duration_seconds", 0.123456789)
    text = m.render()
    assert "hase_schedd_last_cycle_timestamp_seconds 1796313600.25\n" in text
    assert 'hase_schedd_actions_total{kind="nice"} 1234567\n' in text
    assert "hase_schedd_cycle_duration_seconds 0.123456789\n" in text


def test_a_refused_decision_is_in_the_jobs_history_once(tmp_path: Path) -> None:
    """A user set Nice=50 and Features=v100 on job 1: the cycle logged skipped=1 and `--once`
    printed "nice 50 set by the user; left alone", but `hase schedd job 1` showed nothing of
    it (no decisions row). Now one row, not one per cycle while it stands."""
    fb = FakeBackend([pjob("1", nice=50, features="v100")], [gpu_node("a1", "a100")])
    d, store = make(tmp_path, fb)
    d.step()
    rows = store.decisions(job_id="1")
    assert [(r["outcome"], r["nice"], r["features"]) for r in rows] == [("skipped", None, None)]
    assert "left alone" in rows[0]["answer"]
    fb.job_list.append(pjob("2"))  # something changed: the next cycle decides again
    d.step()
    assert len(store.decisions(job_id="1")) == 1
    assert [r["outcome"] for r in store.decisions(job_id="2")] == ["applied"]


class SlowPolicy(NiceEverything):
    """NiceEverything that takes a measurable while to decide."""

    def decide(self, state: ClusterState) -> list[Decision]:
        import time

        time.sleep(0.05)
        return super().decide(state)


def test_each_step_of_a_cycle_is_timed_and_exported(tmp_path: Path) -> None:
    """Where a cycle's wall time goes (observe, state, decide, plan, act), per cycle and summed;
    a quiet cycle only observes. The simulated clock does not move, the steps' wall time does."""
    fb = FakeBackend([pjob("1"), pjob("2")], [gpu_node("a1", "a100")])
    d = Daemon(fb, SlowPolicy(), Est(), Clock(), StateStore(tmp_path / "s.db"),
               CycleConfig(refresh_s=600.0), LoopSettings(interval_s=30, half_life_s=60),
               shares={"a": 1.0})
    d.step()
    first = d.last_result
    assert first is not None and list(first.stages) == ["observe", "state", "decide", "plan", "act"]
    assert first.stages["decide"] >= 0.05 and all(v >= 0 for v in first.stages.values())
    assert max(first.stages, key=first.stages.__getitem__) == "decide"
    text = d.metrics.render()
    assert "# TYPE hase_schedd_cycle_stage_seconds gauge" in text
    assert "# TYPE hase_schedd_cycle_stage_seconds_sum counter" in text
    decide_sum = d.metrics.get("hase_schedd_cycle_stage_seconds_sum", stage="decide")
    assert decide_sum == first.stages["decide"]
    d.step()  # nothing changed: a quiet cycle
    quiet = d.last_result
    assert quiet is not None and quiet.quiet and list(quiet.stages) == ["observe"]
    assert d.metrics.get("hase_schedd_cycle_stage_seconds", stage="decide") == 0.0  # not stale
    assert d.metrics.get("hase_schedd_cycle_stage_seconds_sum", stage="decide") == decide_sum
    assert d.metrics.get("hase_schedd_cycle_stage_seconds_sum", stage="observe") == (
        first.stages["observe"] + quiet.stages["observe"])
