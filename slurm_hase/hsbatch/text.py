"""hsbatch's own help section and the ``--hase-explain`` table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from slurm_hase.hsbatch.plan import TypeRow

HELP = """\

slurm-hase options (hsbatch; every other option goes to sbatch unchanged):
      --hase-KEY=VALUE        describe the workload; KEY is one of model, gflops,
                              params, batch-size, precision, mode, gpus,
                              iterations, epochs, steps-per-epoch, mps,
                              corunners, checkpoint, share (same keys as
                              '#HASE key=value' lines)
      --hase-descriptor=FILE  read the description from FILE (key=value lines
                              or a JSON object); script lines and options win
      --hase-explain          print the predicted runtime per GPU type (stderr)
                              before submitting
      --hase-no-constraint    never add a GPU-type constraint to the job
      --hase-predictor=FILE   predictor model file, or `shipped` (default:
                              HASE_PREDICTOR or the model shipped with slurm-hase)

In the script, '#HASE key=value' lines go with the #SBATCH lines, e.g.
  #HASE model=resnet50 batch_size=64 precision=fp16 iterations=20000
The description is attached as the job comment unless you set --comment.

The constraint keeps the types that fit, finish in the time limit and are at
most (1 + HASE_SPEED_SLACK) times slower than the fastest (default slack 1.0:
2x; 0 = no speed limit); the scheduler daemon may widen it later.

checkpoint=yes says the job saves its state when Slurm stops it and resumes
from it when it starts again: the scheduler may then requeue it so that GPUs
rotate between accounts (hsbatch adds --requeue unless you chose otherwise).

share=yes says the job may run on half a GPU beside another job through MPS:
while it waits, the scheduler may turn its --gres=gpu:1 into an MPS share when
the pair is predicted to get more done than one job alone (Slurm 24.11+).
"""


def _secs(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 1:
        return f"{s * 1000:.0f}ms"
    if s < 120:
        return f"{s:.1f}s"
    if s < 7200:
        return f"{s / 60:.1f}m"
    return f"{s / 3600:.1f}h"


def _flag(v: bool | None) -> str:
    return "?" if v is None else ("yes" if v else "no")


def _fast(r: TypeRow) -> str:
    if r.unknown:
        return "no: unknown" if r.fast is False else "unknown"
    return _flag(r.fast)


def explain_table(
    rows: Sequence[TypeRow], comment: str | None, constraint: str | None, notes: Sequence[str]
) -> str:
    """The per-type prediction table shown by ``--hase-explain``."""
    head = ("GPU type", "GPUs", "mem GB", "iter p50", "iter p90", "run p50", "run p90",
            "fits", "in time", "fast", "candidate")
    # passes every test (the constraint, when one is added, is these types; the line below it
    # says whether one was)
    candidates = {r.gpu_type for r in rows if r.candidate}
    body = [
        (r.gpu_type, str(r.gpus), "-" if r.memory_gb is None else f"{r.memory_gb:g}",
         _secs(r.iter_p50_s), _secs(r.iter_p90_s), _secs(r.runtime_p50_s),
         _secs(r.runtime_p90_s), "no: MIG" if r.one_gpu_only else _flag(r.fits_memory),
         _flag(r.finishes), _fast(r),
         "*" if r.gpu_type in candidates else "")
        for r in rows
    ]
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    lines = ["hsbatch: predicted per GPU type:"]
    for row in [head, *body]:
        lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    if not rows:
        lines.append("  (no GPU types known for this job's partitions)")
    lines.append(f"hsbatch: description: {comment or '(none)'}")
    lines.append(f"hsbatch: constraint added: {constraint or '(none)'}")
    lines.extend(f"hsbatch: note: {n}" for n in notes)
    return "\n".join(lines) + "\n"
