"""Contract suite for ``weight_transport`` components (``actor_rollout_ref.rollout.checkpoint_engine.backend``).

Subclass :class:`WeightTransportContract` in a test module, name the subclass ``Test...`` and set
``component_name``::

    from rlcore_testkit.contracts import WeightTransportContract

    class TestMyTransport(WeightTransportContract):
        component_name = "my_transport"

The suite builds the transport with the default ``checkpoint_engine`` section (set :attr:`engine_kwargs` for the
transport's own arguments) and sends a small state dict into an in-memory receiver that holds the engine's
weights. It checks what every transport must do, whatever it sends over: the engine ends up with the trainer's
exact bytes after the first send, after an update of some tensors and after :meth:`reset`; the report adds up
(the bytes of a full sync, what was sent, the buckets); buckets stay within the bucket size; a receiver's error
reaches the caller.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
import torch

from rlcore.api import CheckpointEngineConfig, PluginManager, RLCoreError, TransportReport, WeightBucket


class MemoryReceiver:
    """An engine's receive side in memory: the weights it holds, its weight version, the buckets it was given."""

    def __init__(self, partial: bool = True) -> None:
        self.weights: dict[str, torch.Tensor] = {}
        self.buckets: list[list[tuple[str, torch.Tensor]]] = []
        self._version = 0
        self._partial = partial

    @property
    def version(self) -> int:
        """One more after every load."""
        return self._version

    @property
    def partial(self) -> bool:
        """Whether the engine keeps the weights an update leaves out."""
        return self._partial

    def load(self, buckets: Iterator[WeightBucket], *, full: bool) -> None:
        """Copy every bucket's tensors in; a full update must name every weight held."""
        received: dict[str, torch.Tensor] = {}
        for bucket in buckets:
            self.buckets.append(list(bucket.tensors))
            received.update((name, tensor.detach().clone()) for name, tensor in bucket.tensors)
        if full and self.weights and set(received) != set(self.weights):
            raise RLCoreError(f"a full update named {sorted(received)}, the engine holds {sorted(self.weights)}")
        if not full and not self._partial:
            raise RLCoreError("this engine takes full updates only")
        self.weights.update(received)
        self._version += 1


class FailingReceiver(MemoryReceiver):
    """A receiver whose engine refuses every update."""

    def load(self, buckets: Iterator[WeightBucket], *, full: bool) -> None:
        """Refuse the update."""
        raise RLCoreError("the engine refused the update")


def trainer_weights(seed: int = 0) -> dict[str, torch.Tensor]:
    """A small state dict: float32 and bfloat16 tensors of several shapes (one larger than the bucket)."""
    generator = torch.Generator().manual_seed(seed)
    return {
        "embed.weight": torch.randn(16, 8, generator=generator),
        "layers.0.weight": torch.randn(8, 8, generator=generator).to(torch.bfloat16),
        "layers.0.bias": torch.randn(8, generator=generator),
        "head.weight": torch.randn(64, 8, generator=generator),
    }


class WeightTransportContract:
    """Tests every weight transport must pass; subclasses set ``component_name``."""

    #: the registered transport name under test
    component_name: ClassVar[str] = ""
    #: ``checkpoint_engine.engine_kwargs`` the transport is built with
    engine_kwargs: ClassVar[dict[str, Any]] = {}
    #: the bucket size of the suite's sends, in bytes (``head.weight`` alone is larger)
    BUCKET_BYTES: ClassVar[int] = 1024

    @pytest.fixture
    def transport(self, plugin_manager: PluginManager) -> Any:
        """A fresh transport built from the default ``checkpoint_engine`` section."""
        cls = plugin_manager.registry.load("weight_transport", self.component_name)
        return cls(CheckpointEngineConfig(backend=self.component_name, engine_kwargs=dict(self.engine_kwargs)))

    def send(self, transport: Any, weights: dict[str, torch.Tensor], receiver: MemoryReceiver) -> TransportReport:
        """One sync of ``weights`` into ``receiver``."""
        report = transport.send(iter(list(weights.items())), receiver, self.BUCKET_BYTES)
        assert isinstance(report, TransportReport)
        return report

    @staticmethod
    def assert_engine_holds(receiver: MemoryReceiver, weights: dict[str, torch.Tensor]) -> None:
        """The engine holds exactly the trainer's names, dtypes and bytes."""
        assert set(receiver.weights) == set(weights)
        for name, tensor in weights.items():
            held = receiver.weights[name]
            assert held.dtype == tensor.dtype and torch.equal(held, tensor), name

    def test_declares_whether_it_sends_part_of_the_weights(self, transport: Any) -> None:
        assert isinstance(type(transport).incremental, bool)

    def test_the_first_send_is_full_and_exact(self, transport: Any) -> None:
        weights, receiver = trainer_weights(), MemoryReceiver()
        report = self.send(transport, weights, receiver)
        self.assert_engine_holds(receiver, weights)
        total = sum(t.numel() * t.element_size() for t in weights.values())
        assert report.full and report.bytes_full == total and report.bytes_sent == total
        assert report.buckets == len(receiver.buckets) >= 1 and report.seconds >= 0

    def test_buckets_stay_within_the_bucket_size(self, transport: Any) -> None:
        receiver = MemoryReceiver()
        self.send(transport, trainer_weights(), receiver)
        for bucket in receiver.buckets:
            size = sum(t.numel() * t.element_size() for _, t in bucket)
            assert size <= self.BUCKET_BYTES or len(bucket) == 1, [name for name, _ in bucket]

    def test_an_update_leaves_the_engine_with_the_new_weights(self, transport: Any) -> None:
        weights, receiver = trainer_weights(), MemoryReceiver()
        self.send(transport, weights, receiver)
        updated = {**weights, "layers.0.bias": weights["layers.0.bias"] + 1, "head.weight": weights["head.weight"] * 2}
        report = self.send(transport, updated, receiver)
        self.assert_engine_holds(receiver, updated)
        assert report.bytes_sent <= report.bytes_full
        assert report.full or type(transport).incremental, "only an incremental transport may send part"

    def test_after_reset_the_next_send_is_full(self, transport: Any) -> None:
        weights, receiver = trainer_weights(), MemoryReceiver()
        self.send(transport, weights, receiver)
        transport.reset()
        report = self.send(transport, weights, receiver)
        assert report.full and report.bytes_sent == report.bytes_full
        self.assert_engine_holds(receiver, weights)

    def test_an_engine_that_takes_full_updates_only_gets_them(self, transport: Any) -> None:
        weights, receiver = trainer_weights(), MemoryReceiver(partial=False)
        self.send(transport, weights, receiver)
        updated = {**weights, "layers.0.bias": weights["layers.0.bias"] - 1}
        assert self.send(transport, updated, receiver).full
        self.assert_engine_holds(receiver, updated)

    def test_the_engines_error_reaches_the_caller(self, transport: Any) -> None:
        with pytest.raises(RLCoreError, match="refused"):
            self.send(transport, trainer_weights(), FailingReceiver())
