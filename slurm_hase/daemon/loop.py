"""The daemon loop: run_cycle every interval, record it, back off while Slurm is away.

All collaborators are passed in (backend, policy, estimator, clock, store, sleep), so tests
drive it with fakes and a fake sleep.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from slurm_hase.daemon.cycle import (
    Clock,
    CycleConfig,
    CycleResult,
    OwnedAttrs,
    QuietWatch,
    RuntimeEstimator,
    run_cycle,
)
from slurm_hase.daemon.metrics import Metrics
from slurm_hase.daemon.rows import decision_rows, owned_row, refusal_rows
from slurm_hase.daemon.seed import add_service
from slurm_hase.errors import (
    PolicyError,
    SlurmError,
    SlurmTimeoutError,
    SlurmUnavailableError,
    StoreError,
)
from slurm_hase.policy.types import Policy
from slurm_hase.policy.usage import UsageLedger
from slurm_hase.slurm.backend import SlurmBackend
from slurm_hase.slurm.tres import mps_from_tres, node_mps_per_gpu
from slurm_hase.slurm.types import AccountingRecord, SchedulerDepths
from slurm_hase.store.state import CycleRow, DecisionRow, StateStore

log = logging.getLogger("slurm_hase.daemon")


@dataclass(frozen=True)
class LoopSettings:
    """Timing of the loop (from DaemonConfig)."""

    interval_s: float = 60.0
    backoff_s: float = 5.0
    backoff_max_s: float = 300.0
    half_life_s: float = 7 * 24 * 3600.0
    history_s: float = 30 * 86400.0  # cycles/decisions kept in the store (0 = all)


class Daemon:
    """Owns the ledger and the ownership map across cycles; one `step()` per cycle."""

    def __init__(self, backend: SlurmBackend, policy: Policy, estimator: RuntimeEstimator,
                 clock: Clock, store: StateStore, cycle_config: CycleConfig,
                 settings: LoopSettings, *, shares: Mapping[str, float] | None = None,
                 metrics: Metrics | None = None,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.backend = backend
        self.policy = policy
        self.estimator = estimator
        self.clock = clock
        self.store = store
        self.config = cycle_config
        # SchedulerParameters could not be read at start: asked again once cycles complete
        self._depth_unread = False
        self._next_depth_try = 0.0
        if cycle_config.scheduler_depth <= 0:
            self.config = replace(cycle_config, scheduler_depth=self._scheduler_depth())
        self.settings = settings
        self.fixed_shares = dict(shares or {})
        # the last shares sacctmgr gave (None: none yet, or it failed since: logged once)
        self._last_shares: Mapping[str, float] | None = None
        self._shares_failing = False
        self.metrics = metrics or Metrics()
        self._monotonic = monotonic
        self.failures = 0
        self.last_failure = ""  # why the latest failed cycle failed (Slurm's own words)
        self.last_result: CycleResult | None = None
        # when sacct could not seed the ledger at start: that start time (history before it is
        # added once sacct answers) and when to ask again
        self._unseeded_at: float | None = None
        self._next_seed_try = 0.0
        self._next_prune = 0.0  # monotonic time of the next history pruning
        self.ledger = self._load_ledger()
        self.owned: dict[str, OwnedAttrs] = {
            jid: OwnedAttrs(*row) for jid, row in store.owned_rows().items()}
        self.watch = QuietWatch()  # quiet cycles (CycleConfig.refresh_s)
        self._skips: dict[str, str] = {}  # job id -> why its decision was refused, last cycle

    def reconfigure(self, policy: Policy, cycle_config: CycleConfig, settings: LoopSettings,
                    shares: Mapping[str, float]) -> None:
        """Take a reloaded config (SIGHUP) from the next cycle on: the ledger, the ownership map
        and the scheduler depth read at start stay; the next cycle decides (not a quiet one)."""
        self.policy = policy
        depth = cycle_config.scheduler_depth
        self.config = replace(cycle_config, scheduler_depth=depth if depth > 0
                              else self.config.scheduler_depth)
        self.settings = replace(settings, half_life_s=self.settings.half_life_s)
        self.fixed_shares = dict(shares)
        self.watch = QuietWatch()
        self._next_prune = 0.0

    def _scheduler_depth(self) -> int:
        """How deep slurmctld's passes look (SchedulerParameters); Slurm's defaults when it
        cannot be read now (the policies then assume bf_max_job_test = 500)."""
        try:
            depths = self.backend.scheduler_depths()
        except SlurmError as exc:
            log.warning("cannot read SchedulerParameters (%s); assuming Slurm's defaults until "
                        "slurmctld answers", exc)
            self._depth_unread = True
            depths = SchedulerDepths()
        log.info("slurmctld looks %d jobs deep (backfill) and %d (main scheduler)",
                 depths.backfill, depths.main)
        return depths.deepest

    def _read_depth_late(self) -> None:
        """The SchedulerParameters slurmctld did not give at start (a controller still starting
        at boot): asked again after a completed cycle, at most every 10 minutes. Before, the
        defaults stood until a restart."""
        now = self._monotonic()
        if not self._depth_unread or now < self._next_depth_try:
            return
        self._next_depth_try = now + 600.0
        try:
            depths = self.backend.scheduler_depths()
        except SlurmError as exc:
            log.debug("SchedulerParameters still unreadable: %s", exc)
            return
        self._depth_unread = False
        log.info("slurmctld looks %d jobs deep (backfill) and %d (main scheduler), read late",
                 depths.backfill, depths.main)
        if depths.deepest != self.config.scheduler_depth:
            self.config = replace(self.config, scheduler_depth=depths.deepest)
            self.watch = QuietWatch()  # the next cycle decides with it

    def _load_ledger(self) -> UsageLedger:
        snap = self.store.latest_usage()
        if snap is not None:
            try:
                ledger = UsageLedger.from_dict(snap)
                if ledger.half_life_s == self.settings.half_life_s:
                    return ledger
                log.info("usage ledger half-life changed; starting a new ledger")
            except PolicyError as exc:
                log.warning("stored usage ledger unusable (%s); starting a new one", exc)
        return self._seed_ledger()

    def _seed_ledger(self) -> UsageLedger:
        """A new ledger seeded from sacct: past GPU service decays like PriorityDecayHalfLife.
        Without sacct (slurmdbd down) it starts from zero now, and step() adds the history
        before now once sacct answers."""
        ledger = UsageLedger(self.settings.half_life_s)
        now = self.clock.now()
        ledger.add_interval("", 0.0, now, now)  # sets the ledger clock to now
        try:
            records = self._history()
        except SlurmError as exc:
            log.warning("cannot seed usage from sacct (%s); starting from zero, and adding the "
                        "history once sacct answers", exc)
            self._unseeded_at = now
            return ledger
        added = add_service(ledger, records, until=now, node_mps=self._node_mps(records))
        log.info("usage ledger seeded from sacct", extra={
            "jobs": len({r.job_id for r in records}), "runs": len(records), "counted": added,
            "usage": {a: round(u) for a, u in ledger.usage().items()}})
        return ledger

    def _history(self) -> list[AccountingRecord]:
        """Finished and running jobs of the last ~4 half-lives (1 to 60 days), from sacct."""
        days = max(1, min(60, round(4 * self.settings.half_life_s / 86400)))
        return self.backend.accounting(since=f"now-{days}days", until="now")

    def _seed_late(self) -> None:
        """The history sacct could not give at start: service up to that start only (what came
        after it the ledger has observed itself), tried again at most every 10 minutes."""
        now = self._monotonic()
        if self._unseeded_at is None or now < self._next_seed_try:
            return
        self._next_seed_try = now + 600.0
        try:
            records = self._history()
        except SlurmError as exc:
            log.debug("sacct still unavailable for the usage history: %s", exc)
            return
        added = add_service(self.ledger, records, until=self._unseeded_at,
                             node_mps=self._node_mps(records))
        self._unseeded_at = None
        log.info("usage ledger seeded from sacct (late)", extra={
            "jobs": len({r.job_id for r in records}), "runs": len(records), "counted": added,
            "usage": {a: round(u) for a, u in self.ledger.usage().items()}})

    def _node_mps(self, records: Sequence[AccountingRecord]) -> dict[str, int]:
        """Node -> MPS units of one of its GPUs (sinfo, asked only when a record holds MPS);
        {} when sinfo fails: gres/mps then reads as a percent of a GPU."""
        try:
            nodes = self.backend.nodes() if any(mps_from_tres(r.alloc_tres) for r in records) else []
        except SlurmError:
            return {}
        return node_mps_per_gpu(nodes)

    def _shares(self) -> Mapping[str, float]:
        """The fixed [shares], else sacctmgr's. sacctmgr needs slurmdbd: while it fails, the
        last shares it gave stand (equal shares before any), and scheduling goes on."""
        if self.fixed_shares:
            return self.fixed_shares
        try:
            shares = self.backend.account_shares()
        except SlurmError as exc:
            if not self._shares_failing:
                self._shares_failing = True
                log.warning("account shares unavailable (sacctmgr: slurmdbd down?); using %s",
                            "the last ones read" if self._last_shares is not None
                            else "equal shares", extra={"reason": f"{type(exc).__name__}: {exc}"})
                self.metrics.inc("hase_schedd_errors_total", kind="shares")
            return self._last_shares or {}
        if self._shares_failing:
            self._shares_failing = False
            log.info("account shares readable again (sacctmgr)")
        self._last_shares = shares
        return shares

    def step(self) -> float:
        """One cycle with recording; returns the delay before the next one."""
        t0 = self._monotonic()
        try:
            result = run_cycle(self.backend, self.policy, self.estimator, self.clock,
                               self.ledger, self._shares(), self.config, owned=self.owned,
                               watch=self.watch, intend=self._intend)
        except SlurmError as exc:
            self.last_failure = str(exc)
            # a Slurm that answers wrongly (output it cannot parse, a command it refuses) is
            # not an unreachable one: the log must not send the admin to look at slurmctld
            away = isinstance(exc, SlurmUnavailableError | SlurmTimeoutError)
            return self._backoff(f"{type(exc).__name__}: {exc}", unreachable=away)
        except PolicyError as exc:
            # Slurm goes on scheduling on its own; the next cycles try again, further apart
            self.last_failure = str(exc)
            log.error("policy failed; nothing changed this cycle", exc_info=exc)
            return self._backoff(str(exc), kind="policy")
        wall = self._monotonic() - t0
        self.last_result = result
        self.metrics.observe_cycle(result, wall)
        if result.quiet:  # not a cycle row; writes kept after a lock are retried
            log.debug("quiet cycle: no job or node changed; nothing decided")
            self._save_usage(result.started)
        else:
            self._record(result, wall)
        if result.unavailable:  # counted as an "unavailable" cycle already (observe_cycle)
            self.last_failure = "slurmctld went away while acting"
            return self._backoff(self.last_failure, counted=True)
        self._seed_late()
        self._read_depth_late()
        if self.failures:
            log.info("cycles complete again after %d failed cycles", self.failures)
        self.failures = 0
        self.metrics.set("hase_schedd_backoff_seconds", 0.0)
        return max(self.settings.interval_s - wall, 0.0)

    def _backoff(self, why: str, *, counted: bool = False, unreachable: bool = True,
                 kind: str = "slurm") -> float:
        """Wait longer after each failed cycle; `counted`: the cycle is in cycles_total already,
        `unreachable`: slurmctld did not answer (else a Slurm command failed otherwise);
        `kind`: what failed, "slurm" or "policy" (hase_schedd_errors_total's label)."""
        self.failures += 1
        # the exponent is capped: 2.0 ** 1024 overflows (slurmctld down for days)
        delay = min(self.settings.backoff_s * 2.0 ** min(self.failures - 1, 60),
                    self.settings.backoff_max_s)
        what = ("policy failed" if kind == "policy" else "slurm unavailable" if unreachable
                else "slurm command failed")
        log.warning(f"{what}, backing off", extra={
            "reason": why, "failures": self.failures, "delay_s": delay})
        if not counted:
            self.metrics.inc("hase_schedd_cycles_total", outcome="error")
        self.metrics.inc("hase_schedd_errors_total", kind=kind)
        self.metrics.set("hase_schedd_backoff_seconds", delay)
        return delay

    def _new_refusals(self, result: CycleResult, listed: set[str]) -> list[DecisionRow]:
        if result.quiet:  # nothing was decided: last cycle's refusals stand
            return []
        rows, self._skips = refusal_rows(result, listed, self._skips)
        return rows

    def _store_write(self, write: Callable[[], None]) -> bool:
        """Run one store write; a StoreError (the write kept in the store's backlog, or
        dropped) is counted and logged, and the cycles go on. Whether it succeeded."""
        try:
            write()
        except StoreError as exc:
            self.metrics.inc("hase_schedd_errors_total", kind="store")
            log.error("state store write failed: %s", exc)
            return False
        return True

    def _intend(self, owned: Mapping[str, OwnedAttrs]) -> bool:
        """What the cycle is about to set, in the store before the first scontrol call;
        whether it was written (a failed write stays in the store's backlog, and the cycle
        sends nothing: cycle._apply)."""
        return self._store_write(
            lambda: self.store.save_owned({jid: owned_row(a) for jid, a in owned.items()}))

    def _record(self, result: CycleResult, wall: float) -> None:
        rows = decision_rows(result, self.config.dry_run)
        rows += self._new_refusals(result, {r.job_id for r in rows})
        # every job whose entry the cycle may have changed (a requeued job's update may be
        # neither planned nor applied), its row written whole: the store equals the entry
        touched = set() if self.config.dry_run else (
            {jid for jid, _ in result.planned} | {jid for jid, _ in result.applied}
            | set(result.requeued) | result.settled)
        owned_now = {jid: owned_row(self.owned[jid]) for jid in touched if jid in self.owned}
        # planned, not sent or refused, and never set by the daemon before: no longer ours
        not_ours = [jid for jid in touched if jid not in self.owned]
        row = CycleRow(started=result.started, duration_s=wall, policy=self.policy.name,
                       dry_run=self.config.dry_run, inputs_digest=result.inputs_digest,
                       pending=result.pending, running=result.running,
                       decisions=len(result.decisions), applied=len(result.applied),
                       skipped=len(result.skipped), errors=len(result.errors),
                       unavailable=result.unavailable)
        log.info("cycle done", extra={
            "cycle_digest": result.inputs_digest, "pending": result.pending,
            "running": result.running, "decisions": len(result.decisions),
            "planned": len(result.planned), "applied": len(result.applied),
            "skipped": len(result.skipped), "errors": len(result.errors),
            "requeued": len(result.requeued),
            "duration_s": round(wall, 4), "dry_run": self.config.dry_run})
        # a dry run beside the daemon (other partitions, say) forgets nothing of what the daemon
        # owns in the shared store. A running job keeps what the daemon set while it waited, and
        # has it again when it is requeued (by rotation, or by Slurm): it stays the daemon's
        # until the job leaves squeue (a job requeued this cycle was running when observed)
        requeued = set(result.requeued)
        observed = {j.job_id for j in result.observed} if self.owned else set()
        gone = [] if self.config.dry_run else [
            jid for jid in self.owned if jid not in observed
            and jid not in result.left_ids and jid not in requeued]
        for jid in gone:
            del self.owned[jid]
        # each write on its own: one that fails (kept for retry) does not stop the other from
        # being queued behind it, so the store never keeps owning what the daemon forgot
        recorded = self._store_write(lambda: self.store.record_cycle(row, rows, owned_now))
        forgot = self._store_write(lambda: self.store.forget([*gone, *not_ours]))
        if not (recorded and forgot):
            return
        self._save_usage(result.started)
        self._prune(result.started)

    def _prune(self, now: float) -> None:
        """Drop cycles older than the history to keep, at most once an hour."""
        if self.settings.history_s <= 0 or self._monotonic() < self._next_prune:
            return
        self._next_prune = self._monotonic() + 3600.0
        # a failed prune stays in the store's backlog: retried with the next write
        self._store_write(lambda: self.store.prune_history(now - self.settings.history_s))

    def _save_usage(self, now: float) -> None:
        """Write the usage ledger (a dry run's is its own: never written) and, with it or
        alone, the writes kept after a lock."""
        if self.config.dry_run:
            self._store_write(self.store.flush)
        else:
            self._store_write(lambda: self.store.save_usage(self.ledger.to_dict(), now))

    def run(self, *, once: bool = False, should_stop: Callable[[], bool] = lambda: False,
            sleep: Callable[[float], None] = time.sleep,
            after_cycle: Callable[[], None] | None = None) -> None:
        """Cycle until `should_stop()` (checked between cycles and while waiting)."""
        while True:
            delay = self.step()
            if after_cycle is not None:
                after_cycle()
            if once:
                return
            waited = 0.0
            while waited < delay:
                if should_stop():
                    return
                chunk = min(1.0, delay - waited)
                sleep(chunk)
                waited += chunk
            if should_stop():
                return


class WallClock:
    """The real clock (epoch seconds)."""

    def now(self) -> float:
        return time.time()
