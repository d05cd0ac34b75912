"""Workload descriptors for simulated jobs (what hsbatch would put in the job comment).

Gavel job types map to predictor models: ResNet-18 -> resnet18-cifar, ResNet-50 -> resnet50,
Transformer -> transformer-multi30k, LM -> lstm-lm, Recommendation -> ncf, A3C -> a3c,
CycleGAN -> cyclegan; the batch size is the one in the job type's name; iterations = the
job's reference runtime * its measured v100 steps/s.
"""

from __future__ import annotations

import re
from dataclasses import replace

from slurm_hase.predict.descriptor import WorkloadDescriptor
from slurm_hase.sim.throughput import REFERENCE_TYPE, ThroughputTable
from slurm_hase.sim.traces import TraceJob

GAVEL_MODELS: dict[str, str] = {
    "ResNet-18": "resnet18-cifar", "ResNet-50": "resnet50", "Transformer": "transformer-multi30k",
    "LM": "lstm-lm", "Recommendation": "ncf", "A3C": "a3c", "CycleGAN": "cyclegan",
}
_BS = re.compile(r"^(?P<name>.+?)\s*\(batch size (?P<bs>\d+)\)$")


def descriptor(job: TraceJob, table: ThroughputTable) -> WorkloadDescriptor:
    """The descriptor a user of this workload would submit."""
    m = _BS.match(job.workload)
    name, bs = (m["name"], int(m["bs"])) if m else (job.workload, None)
    sf = table.scale_factor(job.workload, job.num_gpus)
    tput = table.isolated[REFERENCE_TYPE].get((job.workload, sf), 0.0)
    iters = max(int(job.duration_s * tput), 1) if tput > 0 else None
    mps = int(round(job.gpu_fraction * 100)) if job.gpu_fraction < 1.0 else None
    return WorkloadDescriptor(model=GAVEL_MODELS.get(name, "resnet50"), batch_size=bs,
                              num_gpus=max(job.num_gpus, 1), iterations=iters, mps_share=mps,
                              checkpoint=job.checkpoint)


def comment(job: TraceJob, table: ThroughputTable, auto_types: tuple[str, ...] = ()) -> str:
    """The `{"hase":1,...}` job comment (with the constraint hsbatch added, if any)."""
    return replace(descriptor(job, table), auto_types=auto_types).to_comment()
