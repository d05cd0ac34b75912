"""What hsbatch adds to a described job: the description as the comment, ``--requeue`` for
``checkpoint=yes``, and a GPU-type constraint (only for jobs that may get one). Loaded only
for a job that carries a description (startup time)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from slurm_hase.errors import DescriptorError
from slurm_hase.hsbatch.core import WARN

if TYPE_CHECKING:
    from slurm_hase.hsbatch.argv import HaseOptions
    from slurm_hase.hsbatch.core import Deps, Io
    from slurm_hase.hsbatch.request import Request
    from slurm_hase.hsbatch.sbatch_opts import Scan
    from slurm_hase.hsbatch.script import Header
    from slurm_hase.predict.descriptor import WorkloadDescriptor


def additions(
    sc: Scan, hopts: HaseOptions, header: Header, req: Request, desc: WorkloadDescriptor,
    comment: str | None, io: Io, deps: Deps,
) -> list[str]:
    """Arguments to put before the user's; [] on any failure (with one warning line)."""
    from slurm_hase.hsbatch import plan
    from slurm_hase.hsbatch.judge import judge, why_no_prediction

    test_only = sc.has("test-only")
    constrain = plan.may_constrain(req, test_only=test_only, het=sc.het or header.het,
                                   enabled=not hopts.no_constraint,
                                   pbs=header.pbs and not req.ignore_pbs)
    attach = not test_only and req.comment is None
    head: list[str] = []
    if not test_only:
        if req.comment is not None:
            io.err.write(f"{WARN}--comment is already set, so the workload description is not "
                         "attached (the scheduler will use the job's history)\n")
        if desc.checkpoint:
            if req.requeue is False:
                io.err.write(f"{WARN}checkpoint=yes with --no-requeue: Slurm may not requeue the "
                             "job, so the scheduler will never rotate it\n")
            elif req.requeue is None:
                head.append("--requeue")
    if not (constrain or hopts.explain):
        return ([f"--comment={comment}"] if attach else []) + head
    # narrowing by speed only where the daemon can see it was ours (in the description)
    slack, bad_slack = plan.speed_slack(io.env) if attach else (0.0, None)
    if bad_slack:
        io.err.write(f"{WARN}{bad_slack}\n")
    try:
        rows, notes = judge(req, desc, hopts, deps, io.env, slack)
    except Exception as exc:  # fail-open: predictor, model file or Slurm query broke
        # the description stands without a prediction: the daemon predicts with its own model
        io.err.write(f"{WARN}{why_no_prediction(exc)}; submitting without a GPU-type constraint"
                     f"{' (the description is attached)' if attach else ''}\n")
        return ([f"--comment={comment}"] if attach else []) + head
    constraint, reason = plan.choose_constraint(rows) if constrain else (None, None)
    if reason and constrain:
        notes.append(reason)
    if req.held and not hopts.no_constraint:
        notes.append("held job (--hold): no GPU-type constraint added, since sbatch does not "
                     "check that nodes meet one for a held job")
    impossible = plan.why_nothing_fits(rows, plan.min_memory_gb(desc, plan.params_m(desc)),
                                        req.time_limit_s)
    if impossible:
        io.err.write(f"{WARN}{impossible}; submitting it as asked\n")
    if constraint and attach:
        marked = _marked(desc, constraint)
        if marked is None:  # unrecorded, the daemon would take it for the user's own for good
            io.err.write(f"{WARN}the description leaves no room in the comment to record the "
                         f"GPU-type constraint ({constraint}), so none is added (the scheduler "
                         "daemon chooses the type)\n")
            constraint = None
        else:
            comment = marked
    extra = ([f"--comment={comment}"] if attach else []) + head
    if constraint:
        extra.append(f"--constraint={constraint}")
    if hopts.explain:
        from slurm_hase.hsbatch.text import explain_table

        io.err.write(explain_table(rows, comment if attach else None, constraint, notes))
    return extra


def _marked(desc: WorkloadDescriptor, constraint: str) -> str | None:
    """The comment with the constraint hsbatch added recorded in it (None if it cannot be)."""
    from dataclasses import replace

    try:
        return replace(desc, auto_types=tuple(constraint.split("|"))).to_comment()
    except DescriptorError:
        return None
