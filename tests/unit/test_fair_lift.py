"""fair's lift of jobs the routing starts now (fair.py step 4, order.lift_starting)."""

from __future__ import annotations

from pathlib import Path

from slurm_hase.policy.fair import FairPolicy
from slurm_hase.policy.order import lift_starting
from slurm_hase.policy.route import _starting_now, route_types
from slurm_hase.policy.types import ClusterState, Decision, GpuPool, PendingJob, RunningJob
from slurm_hase.sim.cluster import uniform_cluster
from slurm_hase.sim.engine import SimConfig, simulate
from slurm_hase.sim.slurmconf import SlurmConfig
from slurm_hase.sim.throughput import load_throughputs
from slurm_hase.sim.traces import TraceJob


def job(jid: str, submit: float, rt: dict[str, float], gpus: int = 1) -> PendingJob:
    return PendingJob(jid, "a", "u", submit, gpus, rt)


def slurm_order(decisions: list[Decision], pend: list[PendingJob]) -> list[str]:
    nice = {d.job_id: d.nice for d in decisions if d.nice is not None}
    return [j.job_id for j in sorted(pend, key=lambda j: (nice.get(j.job_id, j.nice),
                                                           j.submit_time, j.job_id))]


def _deep_k80_state() -> ClusterState:
    # both V100s busy until t=1000, both K80s idle. Jobs 1-4 are 50x slower on a K80, so they
    # wait for the V100s; job 5 is only 3x slower there and would wait >= 1100 s for a V100,
    # so the routing starts it now on a K80. Its smaller value there puts it last under theta.
    pools = {"v100": GpuPool("v100", 2, 0), "k80": GpuPool("k80", 2, 2)}
    running = [RunningJob(f"r{i}", "b", "u", "v100", 1, 0.0, 1000.0) for i in range(2)]
    pend = [job(str(i), float(i), {"v100": 100.0, "k80": 5000.0}) for i in range(1, 5)]
    pend.append(job("5", 5.0, {"v100": 100.0, "k80": 300.0}))
    return ClusterState(0.0, pools, pend, running)


def test_a_job_starting_now_on_an_idle_type_goes_ahead_of_jobs_waiting_for_another() -> None:
    st = _deep_k80_state()
    decisions = FairPolicy(rotate=0.0).decide(st)
    types = {d.job_id: d.gpu_types for d in decisions}
    assert types["5"] == ("k80",)
    assert all(types[j] == ("v100",) for j in "1234")
    assert slurm_order(decisions, list(st.pending))[0] == "5"
    # off: the fair order (with theta) keeps it last, where a shallow backfill never looks
    off = FairPolicy(rotate=0.0, lift_starting=0.0).decide(st)
    assert slurm_order(off, list(st.pending))[-1] == "5"


def test_a_lifted_job_stays_behind_earlier_jobs_that_may_use_its_type() -> None:
    a, b = job("A", 0.0, {"v100": 1.0}), job("B", 1.0, {"k80": 1.0})
    c, d = job("C", 2.0, {"k80": 1.0}), job("D", 3.0, {"v100": 1.0})
    routed = {"A": ("v100",), "B": ("k80",), "C": ("k80",), "D": ("v100",)}
    out = lift_starting([a, b, c, d], routed, {"C", "D"})
    assert [j.job_id for j in out] == ["A", "D", "B", "C"]
    # a job allowed two types stays behind the last earlier job using either
    routed2 = {**routed, "C": ("p100",), "D": ("k80", "v100")}
    out2 = lift_starting([a, b, c, d], routed2, {"D"})
    assert [j.job_id for j in out2] == ["A", "B", "D", "C"]
    assert lift_starting([a, b, c, d], routed, set()) == [a, b, c, d]


def test_only_gpus_free_now_count_as_starting() -> None:
    # the pools say nothing is free, but no running job explains the busy GPUs: the timeline
    # plans them as available now, yet no job may be lifted for them
    pools = {"v100": GpuPool("v100", 2, 0), "k80": GpuPool("k80", 2, 0)}
    pend = [job("1", 1.0, {"v100": 100.0, "k80": 300.0})]
    st = ClusterState(0.0, pools, pend, [])
    starting: set[str] = set()
    route_types(pend, {"1": ["k80", "v100"]}, st, 0.0, starting=starting)
    assert starting == set()
    # one K80 free: a 2-GPU job starting "now" does not fit in it, a 1-GPU job does
    pools1 = {"v100": GpuPool("v100", 2, 0), "k80": GpuPool("k80", 2, 1)}
    pend2 = [job("2", 1.0, {"k80": 100.0}, gpus=2), job("3", 2.0, {"k80": 100.0})]
    st1 = ClusterState(0.0, pools1, pend2, [])
    starting1: set[str] = set()
    route_types(pend2, {"2": ["k80"], "3": ["k80"]}, st1, 0.0, starting=starting1)
    assert "2" not in starting1


def test_jobs_already_starting_take_their_gpus_first() -> None:
    # an idle-filled job F holds 2 of the 4 free K80s: of A and B (2 each, routed to start now
    # on K80), only A still fits
    pools = {"k80": GpuPool("k80", 4, 4)}
    f, a, b = (job(j, float(i), {"k80": 100.0}, gpus=2) for i, j in enumerate("FAB"))
    st = ClusterState(0.0, pools, [f, a, b], [])
    routed = {"F": ("k80",), "A": ("k80",), "B": ("k80",)}
    starting = {"F"}
    _starting_now([f, a, b], routed, {"A": 0.0, "B": 0.0}, st, starting)
    assert starting == {"F", "A"}


def test_in_the_simulator_a_deep_job_starts_on_the_idle_type_instead_of_waiting(
        fixtures_dir: Path) -> None:
    # The speed trace's bug, small: Slurm looks 2 jobs deep. Account x holds the 4 V100s for
    # 20,000 s; account y queues 10 jobs that wait for them (7x slower on K80). x's short job
    # (14,199 s on a K80, 2,000 s on a V100) comes after y's jobs in the fair order and is routed
    # to start now on an idle K80: lifted, it starts at the first cycle; otherwise Slurm never
    # reaches it and it waits 40,000 s for a V100.
    table = load_throughputs(fixtures_dir / "sim" / "gavel_throughputs_excerpt.json")

    def tj(i: int, t: float, dur: float, acct: str, c: tuple[str, ...] = ()) -> TraceJob:
        return TraceJob(str(i), t, acct, acct, 1, dur, 1.0, "ResNet-50 (batch size 64)", c)

    jobs = [tj(i, 0, 20000, "x", ("v100",)) for i in range(1, 5)]
    jobs += [tj(100 + i, 10 + i, 10000, "y") for i in range(10)]
    jobs.append(tj(20, 20, 2000, "x"))
    spec = uniform_cluster({"k80": 4, "v100": 4})
    shallow = SlurmConfig(bf_max_job_test=2, default_queue_depth=1)
    done = {}
    for lift in (1.0, 0.0):
        res = simulate(jobs, spec, table, SimConfig(policy="fair", knobs={"lift_starting": lift},
                                                    slurm=shallow, hsbatch_slack=1.0))
        done[lift] = {j.job_id: (j.gpu_type, j.start) for j in res.jobs}
    assert done[1.0]["20"][0] == "k80" and done[1.0]["20"][1] <= 60.0
    assert done[0.0]["20"][1] >= 20000.0
    # y's jobs are not delayed by it: they wait for the V100s either way
    assert all(done[1.0][str(100 + i)][0] == "v100" for i in range(10))
    assert all(done[1.0][str(100 + i)][1] <= done[0.0][str(100 + i)][1] for i in range(10))
