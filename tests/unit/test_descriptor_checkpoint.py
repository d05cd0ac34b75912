"""The checkpoint opt-in travels in the descriptor (``#HASE checkpoint=yes`` -> ``"ckpt":1``)."""

from __future__ import annotations

import pytest

from slurm_hase.errors import DescriptorError
from slurm_hase.predict.descriptor import WorkloadDescriptor


@pytest.mark.parametrize(("value", "want"), [("yes", True), ("TRUE", True), ("1", True), (1, True),
                                             ("no", False), ("off", False), (False, False)])
def test_checkpoint_values(value: object, want: bool) -> None:
    for key in ("checkpoint", "ckpt"):
        assert WorkloadDescriptor.from_mapping({"model": "resnet50", key: value}).checkpoint is want


def test_checkpoint_round_trips_through_the_comment_and_corunners() -> None:
    desc = WorkloadDescriptor.from_mapping({"model": "resnet50", "checkpoint": "yes"})
    text = desc.to_comment()
    assert '"ckpt":1' in text
    assert WorkloadDescriptor.from_comment(text) == desc
    assert desc.with_corunners((10.0,)).checkpoint
    plain = WorkloadDescriptor(model="resnet50")
    assert "ckpt" not in plain.to_comment() and not plain.checkpoint


def test_bad_checkpoint_value_is_named() -> None:
    with pytest.raises(DescriptorError, match="checkpoint: expected yes or no, got 'maybe'"):
        WorkloadDescriptor.from_mapping({"model": "resnet50", "checkpoint": "maybe"})
    with pytest.raises(DescriptorError, match="ckpt: must be a string or number"):
        WorkloadDescriptor.from_comment('{"hase":1,"ckpt":[1]}')
    with pytest.raises(DescriptorError, match="checkpoint: expected yes or no"):
        WorkloadDescriptor.from_comment('{"hase":1,"ckpt":7}')
