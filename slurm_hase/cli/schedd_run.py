"""`hase schedd run`'s wiring: the daemon built from its config, and what a one-off cycle says."""

from __future__ import annotations

import hashlib
import logging
import shlex
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from slurm_hase.daemon.config import DaemonConfig
    from slurm_hase.daemon.cycle import Clock, CycleConfig, CycleResult
    from slurm_hase.daemon.loop import Daemon, LoopSettings
    from slurm_hase.daemon.metrics import Metrics
    from slurm_hase.slurm.backend import SlurmBackend
    from slurm_hase.slurm.types import JobUpdate


def build_daemon(cfg: DaemonConfig, backend: SlurmBackend, clock: Clock, metrics: Metrics
                 ) -> Daemon:
    """The daemon of `cfg`: its policy, the predictor behind its runtime estimates (recorded in
    the state store, which closes when the click command ends) and its cycle settings."""
    from slurm_hase.daemon.estimator import DescriptorEstimator
    from slurm_hase.daemon.history import CachedHistory, HistoryEstimator, predictor_speed
    from slurm_hase.daemon.loop import Daemon
    from slurm_hase.daemon.progress import ProgressEstimator
    from slurm_hase.errors import StoreError
    from slurm_hase.policy.registry import make_policy
    from slurm_hase.predict.modelfile import load_predictor, model_to_json
    from slurm_hase.store.state import StateStore

    policy = make_policy(cfg.policy, **cfg.knobs)
    predictor = load_predictor(cfg.model)
    store = StateStore(cfg.state_db)
    # writes still kept for retry (a lock, a full disk) get a last try at exit, before the lock
    # on the store goes (close callbacks run last-registered first); what cannot be written then
    # is a StoreError, not a silent loss
    click.get_current_context().call_on_close(store.close)
    try:  # the model in use is the daemon's: a dry run beside it (another model?) records none
        if not beside_daemon(cfg):
            store.record_model(cfg.model or "(bundled)",
                               hashlib.sha256(model_to_json(predictor).encode()).hexdigest()[:16],
                               {"meta_keys": sorted(predictor.meta)})
    except StoreError as exc:
        # like any write of the running daemon: kept for retry after a lock or a full disk
        # (written before the next one), and the daemon starts
        logging.getLogger("slurm_hase.daemon").error("state store write failed: %s", exc)
    history = CachedHistory(lambda: backend.accounting(since="now-30days"), clock.now)
    estimator = ProgressEstimator(
        HistoryEstimator(DescriptorEstimator(predictor), history, predictor_speed(predictor)),
        lambda ids: backend.accounting(job_ids=ids), clock.now, cfg.requeue_overhead_s)
    cycle, settings = daemon_settings(cfg)
    return Daemon(backend, policy, estimator, clock, store, cycle, settings, shares=cfg.shares,
                  metrics=metrics)


def beside_daemon(cfg: DaemonConfig) -> bool:
    """Whether `cfg` is a dry run on a store a running daemon holds."""
    from slurm_hase.store.lock import holder

    return cfg.dry_run and holder(cfg.state_db) is not None


def daemon_settings(cfg: DaemonConfig) -> tuple[CycleConfig, LoopSettings]:
    """The cycle settings and loop timing of `cfg`. A dry run beside the daemon running on its
    store prunes none of the store's history: that window is the daemon's (history_days of its
    own config; before, a dry run without --config cut a 90-day history to its default 30)."""
    from slurm_hase.daemon.cycle import CycleConfig
    from slurm_hase.daemon.loop import LoopSettings

    beside = beside_daemon(cfg)
    return (CycleConfig(partitions=cfg.partitions, dry_run=cfg.dry_run,
                        nice_min_delta=cfg.nice_min_delta, nice_quantum=cfg.nice_quantum,
                        nice_scale=cfg.nice_scale, nice_zero=cfg.nice_zero,
                        gpu_types=cfg.gpu_types,
                        update_workers=cfg.update_workers, batch_updates=cfg.batch_updates,
                        requeue=cfg.requeue, requeue_max=cfg.requeue_max,
                        requeue_min_run_s=cfg.requeue_min_run_s, refresh_s=cfg.refresh_s,
                        begin_horizon_s=cfg.begin_horizon_s),
            LoopSettings(cfg.interval_s, cfg.backoff_s, cfg.backoff_max_s, cfg.half_life_s,
                         0.0 if beside else cfg.history_days * 86400.0))


# what a reload cannot change in a running daemon (the store and its lock, the predictor and
# the estimators built at start, the ledger's half-life, the metrics endpoints, the log
# format): kept until a restart
RESTART_ONLY = ("state_db", "dry_run", "model", "half_life_s", "requeue_overhead_s",
                "metrics_textfile", "metrics_port", "metrics_address", "log_format")


def reload_daemon(daemon: Daemon, running: DaemonConfig,
                  load: Callable[[], DaemonConfig]) -> DaemonConfig:
    """SIGHUP: read the config again (`load`) and hand the daemon what it can take while it
    runs; the config now in force. A config that does not load is logged with its error
    (naming the key) and counted, and the running one stays: a bad edit never stops the daemon."""
    from slurm_hase.daemon.logs import set_level
    from slurm_hase.errors import HaseError
    from slurm_hase.policy.registry import make_policy

    log = logging.getLogger("slurm_hase.daemon")
    try:
        new = load()
        policy = make_policy(new.policy, **new.knobs)
    except HaseError as exc:
        daemon.metrics.inc("hase_schedd_errors_total", kind="config")
        log.error("config reload failed, the running config stays: %s", exc)
        return running
    kept = [key for key in RESTART_ONLY if getattr(new, key) != getattr(running, key)]
    if kept:
        log.warning("config reloaded; only a restart applies %s", ", ".join(kept))
        new = replace(new, **{key: getattr(running, key) for key in kept})
    cycle, settings = daemon_settings(new)
    daemon.reconfigure(policy, cycle, settings, new.shares)
    set_level(new.log_level)
    log.info("config reloaded", extra={"policy": new.policy, "interval_s": new.interval_s})
    return new


def cycle_lines(res: CycleResult, policy_name: str, dry_run: bool) -> list[str]:
    """What `run --once` or `--dry-run` prints of a cycle: each update and requeue as the
    scontrol command it ran (or would run; a requeued job's own update right after its requeue),
    each skipped job, and a summary line; one line for a quiet cycle."""
    from slurm_hase.slurm import commands

    if res.quiet:  # observed only: it has no pending count or plan of its own to report
        return [f"# policy {policy_name}: no job or node changed since the last cycle that "
                "decided; nothing decided (the next decides at the latest refresh_s after it)"]
    verb, done = ("would run", res.planned) if dry_run else ("ran", res.applied)
    # a dry run requeues nothing: the requeues it would make are those that passed the
    # daemon's checks (CycleResult.planned_requeues)
    requeues = ([job_id for job_id, _ in res.planned_requeues] if dry_run
                else list(res.requeued))

    def update_line(job_id: str, upd: JobUpdate) -> str:
        return f"{verb}: " + shlex.join(commands.update_job(job_id, upd))

    requeued = set(requeues)
    lines = [update_line(job_id, upd) for job_id, upd in done if job_id not in requeued]
    for job_id in requeues:
        lines.append(f"{verb}: " + shlex.join(commands.requeue(job_id)))
        lines += [update_line(j, upd) for j, upd in done if j == job_id]
    lines += [f"# job {job_id}: {why}" for job_id, why in res.skipped]
    seen = len(res.pending_ids)
    jobs = (f"{res.pending} pending jobs" if res.pending == seen else
            f"{res.pending} of {seen} pending jobs (the others are held, ask for no GPU "
            "with --gpus/--gres, or have no runtime estimate)")
    lines.append(f"# policy {policy_name}: {len(done)} updates"
                 f"{f' and {len(requeues)} requeues' if requeues else ''} for {jobs}, "
                 f"{len(res.errors)} errors, {res.duration_s:.2f}s")
    return lines
