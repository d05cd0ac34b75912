"""plan_updates: the safety rules between decisions and scontrol."""

from __future__ import annotations

from dataclasses import replace

from slurm_hase.daemon.fake import gpu_node
from slurm_hase.daemon.safety import OwnedAttrs, feature_set, plan_updates
from slurm_hase.policy.types import Decision
from slurm_hase.slurm.types import GpuRequest, Job, JobState, JobUpdate

NODES = [gpu_node("a1", "a100"), gpu_node("v1", "v100"), gpu_node("t1", "t4", gpus=2),
         gpu_node("x1", "h100", state="DOWN"),
         gpu_node("n1", "l4", features=()),  # GPUs but no feature: cannot be constrained to
         gpu_node("o1", "a10", partition="other")]


def job(jid: str = "1", *, count: int = 1, scope: str = "node", typed: str | None = None,
        features: str = "", nice: int = 0, state: JobState = JobState.PENDING,
        held: bool = False, partition: str = "gpu") -> Job:
    return Job(job_id=jid, name="j", user="u", account="a", partition=partition, state=state,
               nice=nice, features=features, gpu=GpuRequest(count, typed, scope), held=held)


def plan(decs: list[Decision], jobs: list[Job], owned: dict[str, OwnedAttrs] | None = None
         ) -> tuple[list[tuple[str, JobUpdate]], list[tuple[str, str]]]:
    notes: list[tuple[str, str]] = []
    return plan_updates(decs, jobs, nodes=NODES, owned=owned, skipped=notes), notes


def test_feature_set_shapes() -> None:
    assert feature_set("a100|V100") == frozenset({"a100", "v100"})
    assert feature_set("") == frozenset()
    assert feature_set("a100&ib") is None and feature_set("[a100|v100]") is None


def test_plain_update() -> None:
    out, _ = plan([Decision("1", nice=20, gpu_types=("a100", "v100"))], [job()])
    assert out == [("1", JobUpdate(nice=20, features="a100|v100"))]


def test_unsatisfiable_types_are_dropped_or_refused() -> None:
    out, notes = plan([Decision("1", gpu_types=("h100", "l4", "a10", "gpu"))], [job()])
    assert out == [] and "no usable node" in notes[0][1]  # down, featureless, other partition
    out, notes = plan([Decision("1", gpu_types=("h100", "t4"))], [job()])
    assert out == [("1", JobUpdate(features="t4"))] and "h100" in notes[0][1]
    # per-node GRES: 4 GPUs fit on an a100 node but not on the 2-GPU t4 node
    out, _ = plan([Decision("1", gpu_types=("t4", "a100"))], [job(count=4)])
    assert out == [("1", JobUpdate(features="a100"))]
    # --gpus (job scope) may span nodes: 2 t4 in total is enough for 2, not for 3
    out, _ = plan([Decision("1", gpu_types=("t4",))], [job(count=3, scope="job")])
    assert out == []


def test_typed_job_keeps_its_type_but_may_get_nice() -> None:
    out, notes = plan([Decision("1", nice=5, gpu_types=("v100",))], [job(typed="a100")])
    assert out == [("1", JobUpdate(nice=5))]
    assert "user asked for a100" in notes[0][1]


def test_job_with_preferred_features_keeps_its_constraint_but_may_get_nice() -> None:
    """Slurm tries --prefer first and runs the job there in place of any constraint it can:
    the daemon sets no type on such a job (it would not hold), only its Nice."""
    preferring = replace(job(), prefer="t4")
    out, notes = plan([Decision("1", nice=5, gpu_types=("a100",))], [preferring], owned={})
    assert out == [("1", JobUpdate(nice=5))]
    assert "user prefers 't4' (--prefer)" in notes[0][1]


def test_user_constraint_left_alone_with_and_without_store() -> None:
    user = job(features="v100")
    out, notes = plan([Decision("1", gpu_types=("a100",))], [user], owned={})
    assert out == [] and "user constraint" in notes[0][1]
    # ours per the store -> may change
    out, _ = plan([Decision("1", gpu_types=("a100",))], [user],
                  owned={"1": OwnedAttrs(features="v100")})
    assert out == [("1", JobUpdate(features="a100"))]
    # without a store, complex constraints are never ours
    out, _ = plan([Decision("1", gpu_types=("a100",))], [job(features="v100&ib")])
    assert out == []
    # without a store, a plain list is ours only when every name is a GPU type the nodes offer
    out, notes = plan([Decision("1", gpu_types=("a100",))], [job(features="v100|ib")])
    assert out == [] and "user constraint 'v100|ib'" in notes[0][1]
    out, _ = plan([Decision("1", gpu_types=("a100",))], [job(features="t4|v100")])
    assert out == [("1", JobUpdate(features="a100"))]


def test_user_nice_left_alone() -> None:
    out, notes = plan([Decision("1", nice=30)], [job(nice=100)], owned={})
    assert out == [] and "set by the user" in notes[0][1]
    out, _ = plan([Decision("1", nice=30)], [job(nice=100)], owned={"1": OwnedAttrs(nice=100)})
    assert out == [("1", JobUpdate(nice=30))]


def test_no_storm_and_dead_band() -> None:
    j = job(features="v100|a100", nice=50)
    assert plan([Decision("1", nice=50, gpu_types=("a100", "v100"))], [j])[0] == []
    out = plan_updates([Decision("1", nice=55)], [j], nodes=NODES, nice_min_delta=10)
    assert out == []
    out = plan_updates([Decision("1", nice=10**9)], [j], nodes=NODES, nice_limit=10_000)
    assert out == [("1", JobUpdate(nice=10_000))]


def test_only_observed_pending_unheld_jobs() -> None:
    jobs = [job("1", state=JobState.RUNNING), job("2", held=True), job("3")]
    decs = [Decision(j, nice=9) for j in ("1", "2", "3", "4", "3")]
    out, notes = plan(decs, jobs)
    assert out == [("3", JobUpdate(nice=9))]
    assert [j for j, _ in notes] == ["1", "2", "4", "3"]


def test_without_nodes_no_constraint_is_set() -> None:
    out = plan_updates([Decision("1", nice=3, gpu_types=("a100",))], [job()])
    assert out == [("1", JobUpdate(nice=3))]


def test_empty_types_clear_our_constraint() -> None:
    out, _ = plan([Decision("1", gpu_types=())], [job(features="a100")],
                  owned={"1": OwnedAttrs(features="a100")})
    assert out == [("1", JobUpdate(features=""))]


def test_nice_quantum_rounds() -> None:
    out = plan_updates([Decision("1", nice=137), Decision("2", nice=20)], [job("1"), job("2")],
                       nodes=NODES, nice_quantum=50)
    assert out == [("1", JobUpdate(nice=150))]  # 20 rounds to 0 = unchanged


def test_nice_scale_multiplies_and_widens_the_limit() -> None:
    # PriorityWeightAge=1000 + PriorityWeightFairshare=10000 (the local cluster) -> scale 1100:
    # one policy level (Nice 10) then outweighs every other multifactor term.
    out = plan_updates([Decision("1", nice=10), Decision("2", nice=10_000)], [job("1"), job("2")],
                       nodes=NODES, nice_scale=1100)
    assert out == [("1", JobUpdate(nice=11_000)), ("2", JobUpdate(nice=11_000_000))]


def test_capacity_given_equals_built_from_nodes() -> None:
    from slurm_hase.daemon.safety import Capacity
    from slurm_hase.daemon.state import _summarize

    nodes = [gpu_node("a1", "a100"), gpu_node("v1", "v100", partition="other"),
             gpu_node("d1", "t4", state="DOWN")]
    built = Capacity(nodes)
    _, shared, _, _ = _summarize(nodes)
    assert shared.types == built.types == {"a100", "v100"}
    assert shared._cap == built._cap
    job = Job(job_id="1", name="n", user="u", account="a", partition="gpu",
              state=JobState.PENDING, gpu=GpuRequest(1, None, "job"))
    decs = [Decision("1", gpu_types=("v100", "a100", "t4"))]
    notes_a: list[tuple[str, str]] = []
    notes_b: list[tuple[str, str]] = []
    assert (plan_updates(decs, [job], nodes=nodes, skipped=notes_a)
            == plan_updates(decs, [job], nodes=nodes, capacity=shared, skipped=notes_b))
    assert notes_a == notes_b and notes_a


def test_hsbatch_constraint_recorded_in_the_description_is_ours() -> None:
    from dataclasses import replace

    marked = replace(job(features="v100|a100"),
                     comment='{"hase":1,"model":"resnet50","at":"a100|v100"}')
    out, _ = plan([Decision("1", gpu_types=("a100", "v100", "t4"))], [marked], owned={})
    assert out == [("1", JobUpdate(features="a100|v100|t4"))]
    # the user changed it afterwards (no longer what hsbatch recorded): theirs now
    changed = replace(marked, features="v100")
    out, notes = plan([Decision("1", gpu_types=("a100",))], [changed], owned={})
    assert out == [] and "user constraint" in notes[0][1]
    # a broken description never makes a constraint ours
    broken = replace(marked, comment='{"hase":1,"at":"a100|v100",')
    assert plan([Decision("1", gpu_types=("t4",))], [broken], owned={})[0] == []


def test_indexed_jobs_give_the_same_plan_and_notes_as_the_list() -> None:
    jobs = [job("1"), job("2", state=JobState.RUNNING), job("3", nice=5)]
    decs = [Decision("1", nice=20, gpu_types=("a100",)), Decision("2", nice=3),
            Decision("9", nice=1), Decision("3", nice=5)]
    plain, plain_notes = plan(decs, jobs)
    notes: list[tuple[str, str]] = []
    pending = {j.job_id: j for j in jobs if j.state is JobState.PENDING}
    out = plan_updates(decs, jobs, nodes=NODES, skipped=notes, indexed=pending)
    assert out == plain == [("1", JobUpdate(nice=20, features="a100"))]
    # a running job (not in the index) is still found in `jobs`; an unknown id is still unknown
    assert notes == plain_notes and [n[0] for n in notes] == ["2", "9"]


def test_cpu_job_keeps_its_constraint_and_a_type_listed_twice_counts_once() -> None:
    """A job without a GPU request gets no GPU-type constraint (a Nice may still change); a
    decision naming a type twice (any case) gives it once in the Features."""
    cpu = Job(job_id="9", name="j", user="u", account="a", partition="gpu",
              state=JobState.PENDING, features="bigmem")
    out, notes = plan([Decision("9", nice=5, gpu_types=("a100",))], [cpu])
    assert out == [("9", JobUpdate(nice=5))]
    assert ("9", "no GPU request; constraint left alone") in notes
    out, _ = plan([Decision("1", gpu_types=("a100", "A100", "v100"))], [job()])
    assert out == [("1", JobUpdate(features="a100|v100"))]
