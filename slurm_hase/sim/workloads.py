"""Workload descriptors for simulated jobs (what hsbatch would put in the job comment).

Gavel job types map to predictor models exactly as the predictor's training data maps Gavel's
measurements (predict.loaders.GAVEL_MODELS: ResNet-18 -> resnet18-cifar, ResNet-50 -> resnet50,
Transformer -> transformer-multi30k, LM -> lstm-lm, Recommendation -> recommendation, A3C ->
a3c, CycleGAN -> cyclegan); the batch size is the one in the job type's name, else the one
Gavel measured it at; iterations = the job's reference runtime * its measured v100 steps/s.
"""

from __future__ import annotations

import re
from dataclasses import replace

from slurm_hase.predict.descriptor import WorkloadDescriptor
from slurm_hase.predict.loaders import GAVEL_MODELS
from slurm_hase.sim.throughput import REFERENCE_TYPE, ThroughputTable
from slurm_hase.sim.traces import TraceJob

_BS = re.compile(r"^(?P<name>.+?)\s*\(batch size (?P<bs>\d+)\)$")


def job_type_descriptor(workload: str, num_gpus: int) -> WorkloadDescriptor:
    """The descriptor of a Gavel job type ("ResNet-50 (batch size 64)") on `num_gpus` GPUs, as
    the predictor's training rows describe Gavel's measurements of it."""
    m = _BS.match(workload)
    name, bs = (m["name"], int(m["bs"])) if m else (workload, None)
    model, measured_bs = GAVEL_MODELS.get(name, ("resnet50", None))
    return WorkloadDescriptor(model=model, batch_size=bs if bs is not None else measured_bs,
                              num_gpus=max(num_gpus, 1))


def descriptor(job: TraceJob, table: ThroughputTable) -> WorkloadDescriptor:
    """The descriptor a user of this workload would submit."""
    sf = table.scale_factor(job.workload, job.num_gpus)
    tput = table.isolated[REFERENCE_TYPE].get((job.workload, sf), 0.0)
    iters = max(int(job.duration_s * tput), 1) if tput > 0 else None
    mps = int(round(job.gpu_fraction * 100)) if job.gpu_fraction < 1.0 else None
    return replace(job_type_descriptor(job.workload, job.num_gpus), iterations=iters,
                   mps_share=mps, checkpoint=job.checkpoint, may_share=job.may_share)


def comment(job: TraceJob, table: ThroughputTable, auto_types: tuple[str, ...] = ()) -> str:
    """The `{"hase":1,...}` job comment (with the constraint hsbatch added, if any)."""
    return replace(descriptor(job, table), auto_types=auto_types).to_comment()
