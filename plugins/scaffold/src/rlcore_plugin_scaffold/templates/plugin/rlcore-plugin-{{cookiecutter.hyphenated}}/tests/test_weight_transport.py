"""The weight transport: every tensor reaches a receiver, one bucket each; and rlcore's contract suite."""

from collections.abc import Iterator

import torch
from rlcore.api import CheckpointEngineConfig, WeightBucket
from rlcore_testkit.contracts import WeightTransportContract

from rlcore_plugin_{{ cookiecutter.underscored }}.weight_transport import TensorByTensor


class DictReceiver:
    """A receive side that keeps what it loads."""

    version = 0
    partial = False
    dtype = None

    def __init__(self) -> None:
        self.state: dict[str, torch.Tensor] = {}

    def load(self, buckets: Iterator[WeightBucket], *, full: bool) -> None:
        for bucket in buckets:
            self.state.update(bucket.tensors)
        self.version += 1


def test_every_tensor_arrives() -> None:
    weights = {"a": torch.ones(2, 3), "b": torch.arange(4.0)}
    receiver = DictReceiver()
    report = TensorByTensor(CheckpointEngineConfig()).send(iter(weights.items()), receiver, None)
    assert report.full and report.buckets == 2 and report.bytes_sent == report.bytes_full == 40
    assert receiver.version == 1 and all(torch.equal(receiver.state[k], v) for k, v in weights.items())


class TestWeightTransportContract(WeightTransportContract):
    """rlcore's behavioural checks for ``checkpoint_engine.backend={{ cookiecutter.hyphenated }}``."""

    component_name = "{{ cookiecutter.hyphenated }}"
