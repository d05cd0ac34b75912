"""The discrete-event engine: trace submits, job ends, Slurm passes and the daemon's own cycle.

Events are processed in time order; at one instant: jobs end, jobs arrive, priorities are
recomputed (every PriorityCalcPeriod), the daemon's `run_cycle` runs (every `interval_s`,
with the real policy, estimator and usage ledger), then Slurm's main scheduler (on any change
and every sched_interval) and backfill (every bf_interval).
"""

from __future__ import annotations

import gc
import hashlib
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from slurm_hase.daemon.cycle import DEFAULT_REFRESH_S, CycleConfig, QuietWatch, run_cycle
from slurm_hase.daemon.progress import ProgressEstimator
from slurm_hase.daemon.state import JobEstimate, RuntimeEstimator
from slurm_hase.errors import ConfigError
from slurm_hase.policy.common import NICE_MAX
from slurm_hase.policy.registry import make_policy
from slurm_hase.policy.types import is_passive
from slurm_hase.policy.usage import UsageLedger
from slurm_hase.predict.mig import mig_parts
from slurm_hase.sim.cluster import ClusterSpec
from slurm_hase.sim.sched import SlurmScheduler
from slurm_hase.sim.simslurm import SimJob, SimSlurm
from slurm_hase.sim.slurmconf import SlurmConfig
from slurm_hase.sim.throughput import ThroughputTable
from slurm_hase.sim.traces import LIMIT_TEXT, MAX_SECONDS, TraceJob
from slurm_hase.slurm.types import Job, SchedulerDepths

PROGRESS_MAX_STEP = 1000  # progress() is called at least every this many finished jobs


class SimClock:
    """Simulated time; the engine moves it."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t


class OracleEstimator:
    """The trace's true per-type runtimes and mean measured MPS slowdowns."""

    repeatable = True  # a Job view changes whenever its restarts (hence work left) change

    def __init__(self, sim: SimSlurm) -> None:
        self.sim = sim
        # job id -> (GPU types asked for, estimate): the types rarely change, one slot is enough
        self._cache: dict[str, tuple[tuple[str, ...], int, JobEstimate]] = {}

    def estimate(self, job: Job, gpu_types: Sequence[str]) -> JobEstimate | None:
        hit = self._cache.get(job.job_id)
        if (hit is not None and (hit[0] is gpu_types or hit[0] == tuple(gpu_types))
                and hit[1] == job.restarts):
            return hit[2]
        sj = self.sim.jobs_by_id.get(job.job_id)
        if sj is None:
            return None
        # a requeued job has only its remaining work (checkpoint restart cost included) to do
        left = sj.work_left if sj.restarts else 1.0
        runtimes = {t: r * left for t in gpu_types
                    if math.isfinite(r := sj.runtime.get(t, math.inf))}
        slow = {}
        if sj.frac < 1.0 or sj.trace.may_share:
            slow = {t: self.sim.table.mean_slowdown(t, sj.trace.workload) for t in runtimes}
        est = JobEstimate(runtime_s=runtimes, mps_slowdown=slow, checkpoint=sj.trace.checkpoint,
                          may_share=sj.trace.may_share)
        self._cache[job.job_id] = (tuple(gpu_types), job.restarts, est)
        return est


@dataclass(frozen=True)
class SimConfig:
    """One simulation run."""

    policy: str = "fifo"
    knobs: dict[str, float] = field(default_factory=dict)
    interval_s: float = 60.0
    refresh_s: float = DEFAULT_REFRESH_S  # quiet cycles decide nothing until then
    predictor: str = "oracle"  # or "model": the daemon's DescriptorEstimator + load_predictor()
    model: str | None = None  # the model file of predictor "model" (None: the shipped one)
    ledger_half_life_s: float = 7 * 86400.0
    sample_s: float = 600.0
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    # Share of jobs that opt in to checkpoint + requeue (chosen by a hash of the job id), and
    # the work a restart costs (saving + loading the checkpoint). The daemon may requeue opted-in
    # jobs only when requeue is on, as an admin would set it.
    checkpoint_share: float = 0.0
    requeue_overhead_s: float = 120.0
    # Share of 1-GPU jobs that opt in to MPS pairing (share=yes; another hash of the job id).
    share_optin: float = 0.0
    # Jobs submitted with hsbatch (> 0: its speed slack, HASE_SPEED_SLACK) or plain sbatch (0).
    # hsbatch's constraint uses the runtimes the estimator gives the policies (oracle: true).
    hsbatch_slack: float = 0.0


@dataclass
class Sample:
    """Cluster state at one instant (for plots and fairness over time)."""

    t: float
    pending: int
    running: int
    busy: dict[str, float]
    # account -> (normalised service rate now, demand in GPUs now)
    accounts: dict[str, tuple[float, float]]


@dataclass
class SimResult:
    """Everything a run produced."""

    jobs: list[SimJob]
    samples: list[Sample]
    gpus_by_type: dict[str, int]
    shares: dict[str, float]
    cycles: int
    updates: int
    wall_s: float
    unfinished: int = 0
    quiet_cycles: int = 0  # cycles that found nothing changed and decided nothing
    usage: dict[str, float] = field(default_factory=dict)  # the daemon's ledger, last cycle
    # wall s of each step of the daemon's cycles, summed (CycleResult.stages): of wall_s, the
    # rest is the simulated Slurm and the engine
    daemon_stages_s: dict[str, float] = field(default_factory=dict)


def _sample(sim: SimSlurm, t: float, pending_demand: Mapping[str, float],
            parts: Mapping[str, float]) -> Sample:
    """The state at `t`; `parts`: GPU types whose GPUs are part of a physical GPU (MIG
    instances: predict/mig.py) -> that part, which a running job's demand counts."""
    acc: dict[str, list[float]] = {}
    for job in sim.running.values():
        best = min(job.runtime.values())
        rate = job.trace.num_gpus * job.frac
        entry = acc.setdefault(job.trace.account, [0.0, 0.0])
        entry[0] += rate * best / job.runtime[job.gpu_type]
        asked = job.trace.num_gpus * job.trace.gpu_fraction
        entry[1] += asked * parts.get(job.gpu_type, 1.0) if parts else asked
    for acct, demand in pending_demand.items():
        acc.setdefault(acct, [0.0, 0.0])[1] += demand
    return Sample(t, len(sim.pending), len(sim.running), dict(sim.busy_gpus),
                  {a: (v[0], v[1]) for a, v in acc.items()})


def simulate(trace: Sequence[TraceJob], spec: ClusterSpec, table: ThroughputTable,
             config: SimConfig, estimator: RuntimeEstimator | None = None,
             progress: Callable[[int], None] | None = None) -> SimResult:
    """Replay `trace` on `spec` under `config.policy`; deterministic for a given input.

    While it runs, the objects that exist before it (the trace) are frozen out of garbage
    collection and young objects are collected less often: a big run holds ~10^6 long-lived
    objects that the collector would otherwise walk over and over (about 2x slower cycles at
    100k jobs). No result depends on it; the previous settings are restored on return."""
    threshold = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(threshold[0], 50_000), threshold[1], max(threshold[2], 100))
    try:
        return _simulate(trace, spec, table, config, estimator, progress)
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


def _simulate(trace: Sequence[TraceJob], spec: ClusterSpec, table: ThroughputTable,
              config: SimConfig, estimator: RuntimeEstimator | None,
              progress: Callable[[int], None] | None) -> SimResult:
    wall0 = time.perf_counter()
    check_input(trace, config)
    comments = None
    work_left = False
    if config.predictor == "model" and estimator is None:
        from slurm_hase.daemon.estimator import DescriptorEstimator
        from slurm_hase.predict.modelfile import load_predictor
        from slurm_hase.sim.workloads import comment

        estimator = DescriptorEstimator(load_predictor(config.model))
        work_left = True  # a requeued job's work left from its runs, as the daemon reads it

        def comments(tj: TraceJob, auto: tuple[str, ...]) -> str:
            return comment(tj, table, auto)
    elif config.predictor not in ("oracle", "model"):
        raise ConfigError(f"predictor {config.predictor!r}: use oracle or model")
    if config.checkpoint_share > 0:
        trace = [replace(tj, checkpoint=True) if opts_in(tj.job_id, config.checkpoint_share)
                 else tj for tj in trace]
    if config.share_optin > 0:
        trace = [replace(tj, may_share=True) if tj.num_gpus == 1 and tj.gpu_fraction >= 1.0
                 and opts_in(f"{tj.job_id}:share", config.share_optin) else tj for tj in trace]
    sim = SimSlurm(spec, table, comments, requeue_overhead_s=config.requeue_overhead_s,
                   hsbatch_slack=config.hsbatch_slack)
    shares = {a: float(s) for a, s in spec.shares.items()}
    for tj in trace:
        shares.setdefault(tj.account, 1.0)
    # MIG instance types -> their part of a GPU (the samples' demand counts it; none: {})
    parts = mig_parts(spec.gpus_by_type)
    slurm_cfg = config.slurm
    if spec.billing and not slurm_cfg.billing:
        slurm_cfg = SlurmConfig(**{**slurm_cfg.__dict__, "billing": dict(spec.billing)})
    sched = SlurmScheduler(sim, slurm_cfg, shares)
    sim.depths = depths = SchedulerDepths(backfill=slurm_cfg.bf_max_job_test,
                                          main=slurm_cfg.default_queue_depth)
    policy = make_policy(config.policy, **config.knobs)
    # The Slurm baseline (fifo) decides nothing: Slurm runs as if the daemon were not installed,
    # and no cycle is simulated (its result could not differ; it only cost ~half the run time)
    daemon = not is_passive(policy)
    clock = SimClock()
    est = estimator if estimator is not None else OracleEstimator(sim)
    if work_left:
        est = ProgressEstimator(est, lambda ids: sim.accounting(job_ids=ids), clock.now,
                                config.requeue_overhead_s)
    ledger = UsageLedger(config.ledger_half_life_s)
    # As an admin would set it (templates/schedd.toml.example): one policy Nice level (10)
    # outweighs the age + fairshare terms of the simulated multifactor priority.
    # Policy levels map to Nice <= 0 (nice_zero, the daemon's default), so Slurm's floor of
    # priority at 1 never flattens the order.
    cycle_cfg = CycleConfig(nice_scale=(slurm_cfg.weight_age + slurm_cfg.weight_fairshare) // 10 + 1,
                            nice_zero=NICE_MAX, requeue=config.checkpoint_share > 0,
                            scheduler_depth=depths.deepest, refresh_s=config.refresh_s)
    watch = QuietWatch()
    order = sorted(trace, key=lambda j: (j.submit_s, int(j.job_id) if j.job_id.isdigit() else 0))
    n, i = len(order), 0
    t0 = order[0].submit_s if order else 0.0
    next_cycle = next_calc = next_main = next_bf = next_sample = t0
    samples: list[Sample] = []
    cycles = updates = quiet = 0
    stages: dict[str, float] = {}  # wall s of the daemon's cycle steps, summed
    done_reported = stuck = 0
    # progress(k) after every 1% of the jobs finish (at most every 1,000): one integer compare
    # per event; what the callback does (a bar, a line every ~10 s) is the caller's
    report_every = max(1, min(PROGRESS_MAX_STEP, n // 100))
    cycle_seen = main_seen = bf_seen = -1
    while i < n or sim.pending or sim.running:
        t = min(order[i].submit_s if i < n else math.inf, sim.next_end())
        if daemon and (sim.pending or sim.job_set_version != cycle_seen):
            t = min(t, next_cycle)
        if sim.pending:
            t = min(t, next_bf, next_main, next_calc)
        if not math.isfinite(t):
            break  # pending jobs that can never start (no node satisfies them)
        t = max(t, clock.t)  # timers idle while the queue was empty fire once, now
        if t >= next_sample:
            # the state since the previous event holds at every grid point up to t: one sample
            # per point, so that averages over samples are averages over time (a quiet stretch
            # of hours counts as many samples as a busy one, not as one)
            snap = _sample(sim, clock.t, sched.pending_demand(), parts)
            step = config.sample_s
            points = math.floor((t - next_sample) / step) + 1 if step > 0 else 1
            samples.extend(replace(snap, t=next_sample + k * step) for k in range(points))
            next_sample = _advance(next_sample, t, step)
        clock.t = sim.now = t
        sim.finish_until(t)
        while i < n and order[i].submit_s <= t:
            job = sim.add(order[i], t)
            sched.prioritize(job, t)
            i += 1
        if t >= next_calc:
            sched.recalc(t)
            next_calc = _advance(next_calc, t, slurm_cfg.calc_period_s)
        if daemon and t >= next_cycle and (sim.pending or sim.job_set_version != cycle_seen):
            # Ticks with nothing pending and no start/end since the last cycle are skipped: each
            # would be a quiet cycle, whose only effect (the ledger's) is caught up here.
            cycle_seen = sim.job_set_version
            if t > next_cycle:
                # ticks skipped while nothing was pending or changed: each would have been a
                # quiet cycle counting the same running jobs, up to the last tick before now
                _observe_skipped(ledger, watch, _last_tick(next_cycle, t, config.interval_s))
            res = run_cycle(sim, policy, est, clock, ledger, shares, cycle_cfg, watch=watch)
            cycles += 1
            quiet += res.quiet
            updates += len(res.applied)
            for stage, spent in res.stages.items():
                stages[stage] = stages.get(stage, 0.0) + spent
        if t >= next_cycle:
            next_cycle = _advance(next_cycle, t, config.interval_s)
        # A pass over an unchanged queue and cluster cannot start anything new (free GPUs and
        # reservations are the same, the order is the same), so it is skipped: exact, not lossy.
        if sim.changed or (t >= next_main and sim.state_version != main_seen):
            sim.changed = False
            sched.main(t)
            main_seen = sim.state_version
        if t >= next_main:
            next_main = _advance(next_main, t, slurm_cfg.sched_interval_s)
        if t >= next_bf:
            if sim.state_version != bf_seen:
                sched.backfill(t)
                bf_seen = sim.state_version
            next_bf = _advance(next_bf, t, slurm_cfg.bf_interval_s)
        if progress is not None and len(sim.finished) - done_reported >= report_every:
            progress(len(sim.finished) - done_reported)
            done_reported = len(sim.finished)
        stuck = stuck + 1 if i >= n and not sim.running and sim.pending else 0
        if stuck > 20:
            break  # nothing runs and nothing will arrive: the rest can never start
    if progress is not None:
        progress(len(sim.finished) - done_reported)
    samples.append(_sample(sim, clock.t, sched.pending_demand(), parts))
    return SimResult(jobs=sim.by_idx, samples=samples, gpus_by_type=spec.gpus_by_type,
                     shares=shares, cycles=cycles, updates=updates,
                     wall_s=time.perf_counter() - wall0,
                     unfinished=len(sim.pending) + len(sim.running), quiet_cycles=quiet,
                     usage=ledger.usage(), daemon_stages_s=stages)


def check_input(trace: Sequence[TraceJob], config: SimConfig) -> None:
    """ConfigError for input the event loop cannot run on: a setting that is nan, a submit time
    or runtime that is not finite, or a span of submit times or a runtime over
    traces.MAX_SECONDS (the loop takes a sample every sample_s over the whole run)."""
    for key in ("interval_s", "refresh_s", "ledger_half_life_s", "sample_s", "checkpoint_share",
                "requeue_overhead_s", "hsbatch_slack", "share_optin"):
        if math.isnan(getattr(config, key)):
            raise ConfigError(f"simulation setting {key}: nan is not a number")
    for tj in trace:
        if not (math.isfinite(tj.submit_s) and math.isfinite(tj.duration_s)
                and tj.duration_s <= MAX_SECONDS):
            raise ConfigError(f"job {tj.job_id}: submit time {tj.submit_s:g} s, runtime "
                              f"{tj.duration_s:g} s: each must be finite, the runtime at most "
                              f"the simulator's limit of {LIMIT_TEXT}")
    if trace:
        first = min(trace, key=lambda tj: tj.submit_s)
        last = max(trace, key=lambda tj: tj.submit_s)
        if last.submit_s - first.submit_s > MAX_SECONDS:
            raise ConfigError(f"job {last.job_id}: submitted {last.submit_s - first.submit_s:,.0f} "
                              f"s after job {first.job_id}, over the simulator's limit of "
                              f"{LIMIT_TEXT}")


def opts_in(job_id: str, share: float) -> bool:
    """Whether a job opts in to checkpointing: a stable hash of its id below `share`."""
    h = int.from_bytes(hashlib.sha1(job_id.encode(), usedforsecurity=False).digest()[:8], "big")
    return h / 2.0**64 < share


def _last_tick(mark: float, now: float, step: float) -> float:
    """The last tick of the grid mark + k*step (k >= 0) strictly before `now` (> mark)."""
    if step <= 0:
        return mark
    return mark + (math.ceil((now - mark) / step) - 1) * step


def _observe_skipped(ledger: UsageLedger, watch: QuietWatch, tick: float) -> None:
    """What the quiet cycles of skipped ticks add to the ledger: the running jobs the last
    cycle saw (none started or ended since), integrated up to `tick`."""
    if watch.running:  # (observe itself ignores a tick not after its last observation)
        ledger.observe(watch.running, tick)


def _advance(mark: float, now: float, step: float) -> float:
    """Next periodic tick after `now` on the grid mark + k*step."""
    if step <= 0:
        return math.inf
    k = math.floor((now - mark) / step) + 1
    return mark + k * step
