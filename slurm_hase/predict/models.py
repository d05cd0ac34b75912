"""Table of common models: forward GFLOPs per sample and parameters, to fill a descriptor
when only a model name is given.

FLOPs count multiply and add separately (FLOPs = 2 x MACs), at the input size the benchmarks use
(ImageNet 224x224, CIFAR 32x32, BERT sequence 384, GPT-style 1024 tokens...). Values are
approximate figures from the models' papers and common profilers (fvcore/ptflops); a training
iteration costs about 3x the forward pass.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from slurm_hase.errors import DescriptorError
from slurm_hase.predict.descriptor import WorkloadDescriptor

TRAIN_FLOPS_FACTOR = 3.0


@dataclass(frozen=True)
class ModelInfo:
    """Forward GFLOPs per sample, parameters in millions, a typical batch size."""

    name: str
    gflops_per_sample: float
    params_m: float
    default_batch: int
    family: str


_TABLE: tuple[ModelInfo, ...] = (
    ModelInfo("resnet18", 3.64, 11.7, 64, "cnn"),
    ModelInfo("resnet18-cifar", 1.11, 11.2, 128, "cnn"),
    ModelInfo("resnet34", 7.34, 21.8, 64, "cnn"),
    ModelInfo("resnet50", 8.2, 25.6, 64, "cnn"),
    ModelInfo("resnet101", 15.7, 44.5, 64, "cnn"),
    ModelInfo("resnet152", 23.1, 60.2, 32, "cnn"),
    ModelInfo("resnet50-cifar", 2.6, 23.5, 128, "cnn"),
    ModelInfo("vgg11", 15.2, 132.9, 64, "cnn"),
    ModelInfo("vgg16", 31.0, 138.4, 64, "cnn"),
    ModelInfo("vgg19", 39.3, 143.7, 64, "cnn"),
    ModelInfo("alexnet", 1.43, 61.1, 128, "cnn"),
    ModelInfo("inception-v3", 11.4, 23.8, 64, "cnn"),
    ModelInfo("densenet121", 5.7, 8.0, 64, "cnn"),
    ModelInfo("mobilenet-v2", 0.6, 3.5, 128, "cnn"),
    ModelInfo("efficientnet-b0", 0.78, 5.3, 128, "cnn"),
    ModelInfo("vit-b16", 35.1, 86.6, 64, "transformer"),
    ModelInfo("yolov3", 65.9, 61.9, 16, "detection"),
    ModelInfo("yolov5s", 16.5, 7.2, 32, "detection"),
    ModelInfo("yolov8m", 78.9, 25.9, 16, "detection"),
    ModelInfo("retinanet", 558.0, 36.4, 8, "detection"),
    ModelInfo("ssd-resnet34", 433.0, 20.0, 8, "detection"),
    ModelInfo("unet", 110.0, 31.0, 8, "segmentation"),
    ModelInfo("3d-unet", 3800.0, 19.0, 1, "segmentation"),
    ModelInfo("cyclegan", 113.0, 28.3, 1, "gan"),
    ModelInfo("bert-base", 87.0, 110.0, 32, "transformer"),
    ModelInfo("bert-large", 290.0, 340.0, 16, "transformer"),
    ModelInfo("bert-cola", 4.4, 110.0, 32, "transformer"),
    ModelInfo("gpt2", 350.0, 124.0, 8, "transformer"),
    ModelInfo("gpt2-medium", 820.0, 355.0, 8, "transformer"),
    ModelInfo("gpt2-large", 1640.0, 774.0, 4, "transformer"),
    ModelInfo("gpt2-xl", 3300.0, 1558.0, 2, "transformer"),
    ModelInfo("gpt-j", 13500.0, 6000.0, 1, "transformer"),
    ModelInfo("llama2-7b", 15000.0, 6740.0, 1, "transformer"),
    ModelInfo("llama2-70b", 150000.0, 68980.0, 1, "transformer"),
    ModelInfo("transformer", 12.0, 65.0, 64, "transformer"),
    ModelInfo("transformer-multi30k", 2.5, 50.0, 64, "transformer"),
    ModelInfo("lstm-lm", 3.5, 24.0, 20, "rnn"),
    ModelInfo("deepspeech2", 75.0, 38.0, 16, "rnn"),
    ModelInfo("rnnt", 45.0, 120.0, 16, "rnn"),
    ModelInfo("recommendation", 0.12, 60.0, 1024, "recsys"),
    ModelInfo("ncf", 0.003, 31.8, 1024, "recsys"),
    ModelInfo("dlrm", 0.26, 25000.0, 2048, "recsys"),
    ModelInfo("a3c", 0.4, 1.2, 4, "rl"),
    ModelInfo("stable-diffusion-xl", 120000.0, 3500.0, 1, "diffusion"),
)

MODELS: dict[str, ModelInfo] = {m.name: m for m in _TABLE}

_ALIASES: dict[str, str] = {
    "resnet": "resnet50",
    "vgg": "vgg16",
    "bert": "bert-large",
    "gpt-2": "gpt2",
    "gptj": "gpt-j",
    "lstm": "lstm-lm",
    "lm": "lstm-lm",
    "yolo": "yolov3",
    "yolov8": "yolov8m",
    "yolov5": "yolov5s",
    "recsys": "recommendation",
    "llama2": "llama2-7b",
    "llama-2-7b": "llama2-7b",
    "llama-2-70b": "llama2-70b",
    "sdxl": "stable-diffusion-xl",
    "unet3d": "3d-unet",
    "vit": "vit-b16",
}


def _norm(name: str) -> str:
    return re.sub(r"[\s_]+", "-", name.strip().lower())


def lookup_model(name: str) -> ModelInfo | None:
    """The table entry for a model name (case/underscore-insensitive), or None."""
    n = _norm(name)
    if n in MODELS:
        return MODELS[n]
    if n in _ALIASES:
        return MODELS[_ALIASES[n]]
    compact = n.replace("-", "")
    for key, info in MODELS.items():
        if key.replace("-", "") == compact:
            return info
    return None


def close_models(name: str, n: int = 3) -> list[str]:
    """Up to n table names (or aliases) spelled like `name`, closest first."""
    import difflib

    return difflib.get_close_matches(_norm(name), sorted({*MODELS, *_ALIASES}), n=n, cutoff=0.6)


def iteration_gflops(
    gflops_per_sample: float, batch_size: int, mode: str = "train"
) -> float:
    """GFLOPs of one iteration (one batch) on one GPU."""
    return gflops_per_sample * batch_size * (TRAIN_FLOPS_FACTOR if mode == "train" else 1.0)


@dataclass(frozen=True)
class Filled:
    """A descriptor with every number the predictor needs."""

    gflops: float
    params_m: float
    batch_size: int


def fill(desc: WorkloadDescriptor) -> Filled:
    """Fill GFLOPs/params/batch from the table; DescriptorError if that is impossible."""
    info = lookup_model(desc.model) if desc.model else None
    batch = desc.batch_size or (info.default_batch if info else 1)
    if desc.gflops_per_iter is not None:
        gflops = desc.gflops_per_iter
    elif info is not None:
        gflops = iteration_gflops(info.gflops_per_sample, batch, desc.mode)
    elif desc.params_m is not None:
        # transformer rule of thumb: 2 FLOPs per parameter per sample forward
        gflops = iteration_gflops(2e-3 * desc.params_m, batch, desc.mode)
    else:
        what = f"model {desc.model!r} is not in the model table" if desc.model else "no model"
        close = close_models(desc.model) if desc.model else []
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise DescriptorError(f"gflops: {what}{hint}; give gflops= (GFLOPs per iteration) or params=")
    params = desc.params_m if desc.params_m is not None else (info.params_m if info else gflops / 6.0)
    return Filled(gflops=gflops, params_m=params, batch_size=batch)
