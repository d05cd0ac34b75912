"""SimSlurm + engine: Slurm behaviour, MPS interference, determinism, the daemon cycle in the loop."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from slurm_hase.errors import JobNotFoundError, SlurmCommandError
from slurm_hase.sim.cluster import uniform_cluster
from slurm_hase.sim.engine import SimConfig, simulate
from slurm_hase.sim.metrics import compute
from slurm_hase.sim.simslurm import SimSlurm
from slurm_hase.sim.slurmconf import SlurmConfig
from slurm_hase.sim.throughput import ThroughputTable, load_throughputs
from slurm_hase.sim.traces import TraceJob, load_gavel
from slurm_hase.slurm.backend import SlurmBackend
from slurm_hase.slurm.types import GpuRequest, JobState, JobUpdate

R50 = "ResNet-50 (batch size 64)"
TR = "Transformer (batch size 128)"


@pytest.fixture(scope="module")
def table(fixtures_dir: Path) -> ThroughputTable:
    return load_throughputs(fixtures_dir / "sim" / "gavel_throughputs_excerpt.json")


def _job(i: int, t: float, gpus: int = 1, dur: float = 3600.0, acct: str = "a", wl: str = R50,
         frac: float = 1.0, constraint: tuple[str, ...] = ()) -> TraceJob:
    return TraceJob(str(i), t, acct, acct, gpus, dur, frac, wl, constraint)


def test_constraint_respected_and_fifo_fills_config_order(table: ThroughputTable) -> None:
    spec = uniform_cluster({"k80": 4, "v100": 4})
    jobs = [_job(1, 0, constraint=("v100",)), _job(2, 0), _job(3, 0)]
    res = simulate(jobs, spec, table, SimConfig(policy="fifo"))
    placed = {j.job_id: j.gpu_type for j in res.jobs}
    assert placed == {"1": "v100", "2": "k80", "3": "k80"}
    assert all(j.state is JobState.COMPLETED for j in res.jobs)
    k80 = res.jobs[1]
    assert k80.end - k80.start == pytest.approx(k80.runtime["k80"])


def test_backfill_does_not_delay_the_reserved_job(table: ThroughputTable) -> None:
    spec = uniform_cluster({"v100": 4})
    jobs = [_job(1, 0, gpus=2, dur=1000), _job(2, 1, gpus=4, dur=1000),
            _job(3, 2, gpus=2, dur=500), _job(4, 3, gpus=2, dur=5000)]
    res = simulate(jobs, spec, table, SimConfig(policy="fifo"))
    by = {j.job_id: j for j in res.jobs}
    assert by["3"].start < by["1"].end  # short job backfilled into the idle pair
    assert by["2"].start <= by["1"].start + by["1"].time_limit + 1  # big job not pushed back
    assert by["4"].start >= by["2"].start  # long job would have delayed it: waits


def test_mps_sharing_slows_both_jobs_by_measured_interference(table: ThroughputTable) -> None:
    spec = uniform_cluster({"v100": 1}, gpus_per_node=1)
    jobs = [_job(1, 0, dur=1000, frac=0.5, wl=R50), _job(2, 0, dur=1000, frac=0.5, wl=TR)]
    res = simulate(jobs, spec, table, SimConfig(policy="fifo"))
    a, b = res.jobs
    assert a.start == b.start == 0.0  # one GPU, shared
    fa = table.pair_factor("v100", R50, TR)
    fb = table.pair_factor("v100", TR, R50)
    first = min(a.end, b.end)
    assert first == pytest.approx(min(1000 / fa, 1000 / fb))
    assert max(a.end, b.end) > 1000.0


def test_backend_protocol_updates(table: ThroughputTable) -> None:
    sim = SimSlurm(uniform_cluster({"k80": 4, "v100": 4}), table)
    backend: SlurmBackend = sim  # the daemon's Protocol, checked by mypy
    assert backend.version().startswith("sim")
    job = sim.add(_job(1, 0), 0.0)
    sim.update_job("1", JobUpdate(nice=50, features="v100"))
    view = sim.jobs()[0]
    assert view.nice == 50 and view.features == "v100" and view.pending
    assert sim.allowed_types(job) == ("v100",)
    with pytest.raises(SlurmCommandError, match="Invalid feature"):
        sim.update_job("1", JobUpdate(features="h100"))
    with pytest.raises(JobNotFoundError):
        sim.update_job("9", JobUpdate(nice=1))
    sim.start(job, "v100", 0.0)
    with pytest.raises(SlurmCommandError, match="no longer pending"):
        sim.update_job("1", JobUpdate(nice=1))
    nodes = sim.nodes()
    assert sum(n.gpus_alloc.get("v100", 0) for n in nodes) == 1
    assert sim.jobs()[0].alloc_gpus == {"v100": 1}
    assert sim.jobs() is not sim.jobs() and sim.jobs()[0] is sim.jobs()[0]  # views reused


def test_fairshare_priority_prefers_light_accounts(table: ThroughputTable) -> None:
    spec = uniform_cluster({"v100": 1}, gpus_per_node=1)
    jobs = [_job(i, float(i), dur=600, acct="heavy") for i in range(1, 6)]
    jobs.append(_job(6, 10.0, dur=600, acct="light"))
    cfg = SimConfig(policy="fifo", slurm=SlurmConfig(calc_period_s=60))
    res = simulate(jobs, spec, table, cfg)
    order = [j.job_id for j in sorted(res.jobs, key=lambda j: j.start)]
    assert order.index("6") == 1  # right after the job already running


def _gavel_jobs(fixtures_dir: Path, table: ThroughputTable, seed: int) -> list[TraceJob]:
    jobs = load_gavel(fixtures_dir / "sim" / "gavel_max_min_fairness_excerpt.trace", table,
                      np.random.default_rng(seed))
    return [replace(j, submit_s=i * 600.0) for i, j in enumerate(jobs)]


@pytest.mark.parametrize("policy", ["fifo", "hase", "fair", "gavel"])
def test_every_policy_runs_through_the_daemon_cycle(policy: str, table: ThroughputTable,
                                                    fixtures_dir: Path) -> None:
    jobs = _gavel_jobs(fixtures_dir, table, 0)
    spec = uniform_cluster({"k80": 8, "p100": 8, "v100": 8})
    res = simulate(jobs, spec, table, SimConfig(policy=policy, interval_s=300))
    m = compute(res)
    assert m["jobs"] == len(jobs) and m["unfinished"] == 0
    if policy == "fifo":
        assert res.cycles == 0  # passive: Slurm alone, as without the daemon
    else:
        assert res.cycles > 0
        assert res.updates > 0  # the policy's decisions reached SimSlurm through run_cycle


def test_skipping_the_passive_fifo_cycle_changes_no_result(table: ThroughputTable,
                                                          fixtures_dir: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    jobs = _gavel_jobs(fixtures_dir, table, 1)
    spec = uniform_cluster({"k80": 4, "p100": 4, "v100": 4})
    skipped = simulate(jobs, spec, table, SimConfig(policy="fifo", interval_s=120))
    monkeypatch.setattr("slurm_hase.sim.engine.is_passive", lambda policy: False)
    cycled = simulate(jobs, spec, table, SimConfig(policy="fifo", interval_s=120))
    assert skipped.cycles == 0 and cycled.cycles > 0
    assert ([(j.trace.job_id, j.gpu_type, j.start, j.end) for j in skipped.jobs]
            == [(j.trace.job_id, j.gpu_type, j.start, j.end) for j in cycled.jobs])


def test_quiet_cycles_skip_deciding_and_refresh_bounds_them(table: ThroughputTable,
                                                           fixtures_dir: Path) -> None:
    """With refresh_s the cycles that see no change decide nothing (the daemon's own code)."""
    jobs = _gavel_jobs(fixtures_dir, table, 2)
    spec = uniform_cluster({"k80": 4, "p100": 4, "v100": 4})
    every = simulate(jobs, spec, table, SimConfig(policy="fair", interval_s=60, refresh_s=0))
    quiet = simulate(jobs, spec, table, SimConfig(policy="fair", interval_s=60, refresh_s=600))
    rare = simulate(jobs, spec, table, SimConfig(policy="fair", interval_s=60, refresh_s=1e9))
    assert every.quiet_cycles == 0 and 0 < quiet.quiet_cycles < rare.quiet_cycles
    for res in (quiet, rare):
        assert compute(res)["unfinished"] == 0 and res.updates > 0


def test_same_seed_same_numbers(table: ThroughputTable, fixtures_dir: Path) -> None:
    spec = uniform_cluster({"k80": 8, "p100": 8, "v100": 8})
    runs = []
    for seed in (3, 3, 4):
        res = simulate(_gavel_jobs(fixtures_dir, table, seed), spec, table,
                       SimConfig(policy="fair", interval_s=300))
        m = compute(res)
        m.pop("wall_s")
        runs.append(m)
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]  # accounts are drawn from the seed


def test_model_predictor_goes_through_the_daemon_estimator(table: ThroughputTable,
                                                            fixtures_dir: Path) -> None:
    jobs = _gavel_jobs(fixtures_dir, table, 0)
    spec = uniform_cluster({"k80": 8, "p100": 8, "v100": 8})
    res = simulate(jobs, spec, table, SimConfig(policy="hase", interval_s=300, predictor="model"))
    assert res.unfinished == 0 and res.updates > 0
    assert res.jobs[0].comment.startswith('{"hase":1')  # what hsbatch would have written


def test_a_node_shares_one_gpu_through_mps_as_slurm_does(table: ThroughputTable) -> None:
    """Two 0.6 shares cannot share a GPU. On one 4-GPU node the second waits for the first, as
    Slurm 22.05 and 24.11 make it wait (tests/fixtures/slurm/local-*/
    scontrol-show-node-gres-used-jobs.txt); on two nodes it starts on the other at once."""
    jobs = [_job(1, 0, dur=1000, frac=0.6), _job(2, 0, dur=1000, frac=0.6)]
    one = simulate(jobs, uniform_cluster({"v100": 4}), table, SimConfig(policy="fifo"))
    first, second = sorted(one.jobs, key=lambda j: j.job_id)
    assert second.first_start >= first.end > 0  # waited beside three free GPUs
    two = simulate(jobs, uniform_cluster({"v100": 8}), table, SimConfig(policy="fifo"))
    assert [j.first_start for j in two.jobs] == [0.0, 0.0]
    assert sorted(j.alloc[0][0] for j in two.jobs) == [0, 1]  # (node, GPUs): one a node
    # a whole-GPU job still takes a free GPU beside the shared one
    mixed = simulate([*jobs[:1], _job(3, 0, dur=1000)], uniform_cluster({"v100": 4}), table,
                     SimConfig(policy="fifo"))
    assert [j.first_start for j in mixed.jobs] == [0.0, 0.0]


def test_requeue_keeps_progress_charges_overhead_and_frees_gpus(table: ThroughputTable) -> None:
    from dataclasses import replace

    spec = uniform_cluster({"v100": 2})
    sim = SimSlurm(spec, table, requeue_overhead_s=60.0)
    job = sim.add(replace(_job(1, 0, dur=1000), checkpoint=True), 0.0)
    sim.start(job, "v100", 0.0)
    full = job.runtime["v100"]
    sim.now = full / 2
    sim.requeue("1")
    assert job.state is JobState.PENDING and job.restarts == 1 and sim.type_free["v100"] == 2
    assert job.work_left == pytest.approx(0.5 + 60.0 / full)
    view = next(v for v in sim.jobs() if v.job_id == "1")
    assert view.requeue and view.restarts == 1 and view.submit_time == int(full / 2)
    assert '"ckpt":1' in view.comment
    with pytest.raises(SlurmCommandError):
        sim.requeue("1")  # pending: nothing to requeue
    # sacct -D's view: the run the requeue ended, then (once done) the last one
    (run,) = sim.accounting(job_ids=["1"])
    assert (run.state, run.elapsed_s, run.alloc_gpus) == (JobState.REQUEUED, int(full / 2),
                                                          {"v100": 1})
    assert sim.accounting() == []  # no job finished yet
    sim.start(job, "v100", full)
    assert sim.next_end() == pytest.approx(full + full * (0.5 + 60.0 / full))
    with pytest.raises(JobNotFoundError):
        sim.requeue("nope")


def test_the_model_predictor_sees_a_requeued_jobs_work_left(table: ThroughputTable) -> None:
    """The daemon's ProgressEstimator over the simulated sacct: the work left after a requeue,
    as the oracle knows it (the overhead alike), where the model alone gives the whole job."""
    from dataclasses import replace

    from slurm_hase.daemon.estimator import DescriptorEstimator
    from slurm_hase.daemon.progress import ProgressEstimator
    from slurm_hase.predict.modelfile import load_predictor
    from slurm_hase.sim.engine import OracleEstimator
    from slurm_hase.sim.workloads import comment

    spec = uniform_cluster({"v100": 2})
    sim = SimSlurm(spec, table, lambda tj, auto: comment(tj, table, auto),
                   requeue_overhead_s=60.0)
    job = sim.add(replace(_job(1, 0, dur=4000), checkpoint=True), 0.0)
    sim.start(job, "v100", 0.0)
    sim.now = job.runtime["v100"] / 4
    sim.requeue("1")
    view = next(v for v in sim.jobs() if v.job_id == "1")
    model = DescriptorEstimator(load_predictor(None))
    whole = model.estimate(view, ["v100"])
    left = ProgressEstimator(model, lambda ids: sim.accounting(job_ids=ids), lambda: sim.now,
                             60.0).estimate(view, ["v100"])
    oracle = OracleEstimator(sim).estimate(view, ["v100"])
    assert whole is not None and left is not None and oracle is not None
    done = (int(job.runtime["v100"] / 4) - 60.0) / whole.runtime_s["v100"]
    assert left.runtime_s["v100"] == pytest.approx(whole.runtime_s["v100"] * (1 - done))
    assert oracle.runtime_s["v100"] == pytest.approx(job.runtime["v100"] * job.work_left)


def test_model_predictor_rotation_runs_to_the_end(table: ThroughputTable) -> None:
    spec = uniform_cluster({"v100": 4})
    jobs = [_job(i, 0, dur=40_000, acct="a") for i in range(4)]
    jobs += [_job(10 + i, 4000 + i, dur=600, acct="b") for i in range(2)]
    cfg = SimConfig(policy="fair", knobs={"min_run_s": 1800}, checkpoint_share=1.0,
                    predictor="model")
    res = compute(simulate(jobs, spec, table, cfg))
    assert res["requeues"] >= 1 and res["unfinished"] == 0


def test_rotation_in_the_loop_is_deterministic_and_counted(table: ThroughputTable) -> None:
    spec = uniform_cluster({"v100": 4})
    # account a fills the cluster with long jobs; b arrives later with short ones
    jobs = [_job(i, 0, dur=40_000, acct="a") for i in range(4)]
    jobs += [_job(10 + i, 4000 + i, dur=600, acct="b") for i in range(2)]
    cfg = SimConfig(policy="fair", knobs={"min_run_s": 1800}, checkpoint_share=1.0)
    first = compute(simulate(jobs, spec, table, cfg))
    assert first["requeues"] >= 1 and first["unfinished"] == 0
    assert compute(simulate(jobs, spec, table, cfg)) | {"wall_s": 0} == first | {"wall_s": 0}
    res = simulate(jobs, spec, table, cfg)
    b = [j for j in res.jobs if j.trace.account == "b"]
    assert max(j.first_start for j in b) < 4000 + 600  # started at the next cycle, not after 40k s
    off = simulate(jobs, spec, table, SimConfig(policy="fair", knobs={"min_run_s": 1800}))
    assert compute(off)["requeues"] == 0
    assert min(j.first_start for j in off.jobs if j.trace.account == "b") > 30_000


def test_hsbatch_submission_constrains_to_fast_types_and_marks_it(table: ThroughputTable) -> None:
    from slurm_hase.predict.descriptor import WorkloadDescriptor

    spec = uniform_cluster({"k80": 4, "p100": 4, "v100": 4})
    plain = SimSlurm(spec, table).add(_job(1, 0), 0.0)
    assert plain.features == "" and plain.comment == ""
    sim = SimSlurm(spec, table, hsbatch_slack=0.5)
    job = sim.add(_job(1, 0), 0.0)
    best = min(job.runtime.values())
    want = tuple(t for t in sim.type_order if job.runtime[t] <= 1.5 * best)
    assert 0 < len(want) < 3 and job.features == "|".join(want)
    desc = WorkloadDescriptor.from_comment(job.comment)
    assert desc is not None and desc.auto_types == want
    # a trace constraint is the user's: hsbatch adds nothing over it
    kept = sim.add(_job(2, 0, constraint=("k80",)), 0.0)
    assert kept.features == "k80" and kept.comment == ""
    # the daemon may widen hsbatch's constraint (it is marked as ours)
    res = simulate([_job(3, 0)], spec, table, SimConfig(policy="fair", hsbatch_slack=0.5))
    assert res.jobs[0].gpu_type in want


def test_samples_lie_on_a_uniform_grid_through_quiet_stretches(table: ThroughputTable) -> None:
    # one 10-hour job alone: no event for hours, yet every 600 s grid point gets a sample, so
    # averages over samples (Jain over time) are averages over time
    spec = uniform_cluster({"v100": 4})
    res = simulate([_job(1, 0.0, dur=36000.0), _job(2, 60.0, dur=600.0, acct="b")], spec, table,
                   SimConfig(policy="fifo", sample_s=600.0))
    times = [s.t for s in res.samples[:-1]]  # the last one is the final state
    assert times == [600.0 * k for k in range(len(times))]
    end = max(j.end for j in res.jobs)
    assert len(times) == int(end // 600.0) + 1
    assert all(s.running == 1 for s in res.samples[2:-1])  # the quiet stretch, sampled as it was


def test_ledger_counts_service_through_stretches_without_cycles(table: ThroughputTable) -> None:
    # a 10-hour job alone: nothing pends and nothing changes for hours, so the engine runs no
    # cycle, yet the ledger must count its service as the quiet cycles of those ticks would
    spec = uniform_cluster({"v100": 4})
    res = simulate([_job(1, 0.0, dur=36000.0), _job(2, 40000.0, dur=600.0, acct="b")], spec,
                   table, SimConfig(policy="fair", interval_s=60.0))
    job = res.jobs[0]
    ran = job.end - job.start
    h = SimConfig().ledger_half_life_s
    last = max(j.end for j in res.jobs) + 60.0  # the ledger's last observation is before this

    def service(dt: float, decayed_to: float) -> float:  # 1 GPU at its best speed for dt
        return float((h / np.log(2)) * (1 - 0.5 ** (dt / h)) * 0.5 ** ((decayed_to - job.end) / h))
    # up to the last tick before the job ended (< 60 s short), never more than it ran
    assert service(ran - 60.0, last) * (1 - 1e-9) <= res.usage["a"] <= service(ran, job.end)


def test_copied_views_equal_freshly_built_ones(table: ThroughputTable, fixtures_dir: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # SimSlurm copies a pending job's last view when only its reason, priority, Nice, Features
    # or hold moved; every view the daemon observes must equal the one _view builds
    real_jobs = SimSlurm.jobs
    seen = {"checked": 0}

    def checked_jobs(self: SimSlurm) -> list:
        views = real_jobs(self)
        for view in views:
            sim_job = self.jobs_by_id[view.job_id]
            assert view == self._view(sim_job)
            seen["checked"] += 1
        return views

    monkeypatch.setattr(SimSlurm, "jobs", checked_jobs)
    copies = {"n": 0}
    real_fresh = SimSlurm._fresh_view

    def counting_fresh(self: SimSlurm, job):  # type: ignore[no-untyped-def]
        before = job.last_view
        view = real_fresh(self, job)
        copies["n"] += before is not None and view.gpu is before.gpu and view.state is before.state
        return view

    monkeypatch.setattr(SimSlurm, "_fresh_view", counting_fresh)
    spec = uniform_cluster({"k80": 4, "p100": 4, "v100": 4})
    simulate(_gavel_jobs(fixtures_dir, table, 1), spec, table,
             SimConfig(policy="fair", interval_s=60, checkpoint_share=1.0))
    assert seen["checked"] > 100 and copies["n"] > 10  # the copy path ran, and matched


def test_a_pending_job_turned_into_an_mps_share_as_slurm_24_11_does(
        table: ThroughputTable) -> None:
    sim = SimSlurm(uniform_cluster({"v100": 4}), table)
    opted = sim.add(replace(_job(1, 0), may_share=True), 0.0)
    sim.add(_job(2, 0), 0.0)
    views = {j.job_id: j for j in sim.jobs()}
    # an opted-in job was submitted as --gres=gpu:1 (TresPerNode), the request a share replaces
    assert views["1"].gpu == GpuRequest(1, None, "node") and views["1"].tres_per_node
    assert views["2"].gpu == GpuRequest(1, None, "job") and not views["2"].tres_per_node
    sim.update_job("1", JobUpdate(tres_per_node="gres/mps:50"))
    view = sim.job("1")
    assert view.tres_per_node == "gres/mps:50" and view.gpu is not None and view.gpu.mps == 50
    assert opted.frac == 0.5 and opted.trace.gpu_fraction == 1.0  # what it asked at submission
