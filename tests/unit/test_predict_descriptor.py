"""WorkloadDescriptor: parsing #HASE key=value mappings and the job-comment form."""

from __future__ import annotations

import json

import pytest

from slurm_hase.errors import DescriptorError
from slurm_hase.predict.descriptor import MAX_COMMENT_BYTES, WorkloadDescriptor


def test_from_mapping_strings_and_aliases() -> None:
    d = WorkloadDescriptor.from_mapping(
        {"model": "resnet50", "bs": "64", "precision": "FP16", "mode": "inference", "gpus": "2",
         "iters": "1000", "mps": "50%", "gflops": "1.5e3", "params": "25.6"})
    assert d == WorkloadDescriptor(model="resnet50", gflops_per_iter=1500.0, params_m=25.6, batch_size=64,
                                   precision="fp16", mode="infer", num_gpus=2, iterations=1000, mps_share=50)


def test_epochs_times_steps() -> None:
    d = WorkloadDescriptor.from_mapping({"model": "bert", "epochs": "3", "steps_per_epoch": "500"})
    assert d.iterations == 1500
    with pytest.raises(DescriptorError, match="steps_per_epoch"):
        WorkloadDescriptor.from_mapping({"epochs": "3"})
    with pytest.raises(DescriptorError, match="iterations"):
        WorkloadDescriptor.from_mapping({"iterations": "3", "epochs": "1", "steps_per_epoch": "2"})


@pytest.mark.parametrize(
    ("mapping", "key"),
    [({"batch_size": "-4"}, "batch_size"), ({"bs": "abc"}, "batch_size"), ({"precision": "fp64"}, "precision"),
     ({"mode": "serve"}, "mode"), ({"gpus": "0"}, "gpus"), ({"mps": "150"}, "mps"), ({"gflops": "nan"}, "gflops"),
     ({"gflops": "-1"}, "gflops"), ({"model": "a b;rm -rf"}, "model"), ({"colour": "red"}, "colour")],
)
def test_from_mapping_errors_name_the_key(mapping: dict[str, object], key: str) -> None:
    with pytest.raises(DescriptorError, match=key):
        WorkloadDescriptor.from_mapping(mapping)


def test_comment_round_trip_and_size() -> None:
    d = WorkloadDescriptor(model="gpt2-medium", gflops_per_iter=12345.678, params_m=355.0, batch_size=8,
                           precision="bf16", mode="train", num_gpus=4, iterations=10**9, mps_share=30,
                           corunner_gflops=(1.5, 2000.0))
    text = d.to_comment()
    assert text.startswith('{"hase":1,')
    assert len(text.encode()) <= MAX_COMMENT_BYTES
    back = WorkloadDescriptor.from_comment(f"user text before {text}")
    assert back is not None
    assert back.gflops_per_iter == pytest.approx(12350.0)  # 4 significant digits
    assert back.corunner_gflops == (1.5, 2000.0)
    assert back.model == d.model and back.iterations == d.iterations and back.precision == "bf16"


def test_from_comment_not_ours() -> None:
    assert WorkloadDescriptor.from_comment("") is None
    assert WorkloadDescriptor.from_comment("my experiment 42") is None
    assert WorkloadDescriptor.from_comment('{"other": 1}') is None


@pytest.mark.parametrize(
    "text",
    ['{"hase":1,"bs":', '{"hase":2,"bs":4}', '{"hase":1,"bs":NaN}', '{"hase":1,"bs":true}',
     '{"hase":1,"model":{"x":1}}', '{"hase":1,"co":"1;2"}', '{"hase":1,"evil":1}',
     '{"hase":1,"model":"' + "a" * 600 + '"}', '{"hase":' + "[" * 5000 + "]" * 5000 + "}"],
)
def test_from_comment_hostile(text: str) -> None:
    with pytest.raises(DescriptorError):
        WorkloadDescriptor.from_comment(text)


def test_to_comment_is_json() -> None:
    assert json.loads(WorkloadDescriptor(model="resnet50").to_comment()) == {"hase": 1, "model": "resnet50"}


def test_canonical_key() -> None:
    from slurm_hase.predict.descriptor import KEYS, USER_KEYS, canonical_key, key_aliases

    assert canonical_key("bs") == "batch_size" and canonical_key(" Num-GPUs ") == "gpus"
    assert set(KEYS) <= set(key_aliases(internal=True))
    # hsbatch's own key is neither offered to users nor suggested as a close match
    assert set(USER_KEYS) <= set(key_aliases()) and "auto_types" not in USER_KEYS
    assert not {"at", "auto_types"} & set(key_aliases())
    with pytest.raises(DescriptorError, match=r"unknown key \((?!did you mean at)"):
        canonical_key("ap")
    with pytest.raises(DescriptorError, match="unknown key"):
        canonical_key("colour")
    with pytest.raises(DescriptorError, match=r"unknown key \(did you mean batch_size\?"):
        canonical_key("batch_sise")
