"""Contract suite for ``weight_transport`` components (``actor_rollout_ref.rollout.checkpoint_engine.backend``).

Subclass :class:`WeightTransportContract` in a test module, name the subclass ``Test...`` and set
``component_name``::

    from rlcore_testkit.contracts import WeightTransportContract

    class TestMyTransport(WeightTransportContract):
        component_name = "my_transport"

The suite builds the transport with the default ``checkpoint_engine`` section (set :attr:`engine_kwargs` for the
transport's own arguments) and sends a small state dict into an in-memory receiver that holds the engine's
weights (in its own dtype, as an engine casts what it is given). It checks what every transport must do,
whatever it sends over: the engine ends up with the trainer's exact bytes after the first send, after an update
of some tensors and after :meth:`reset`, and after small updates (in float32 and in a bfloat16 engine) bit for
bit what a full sync leaves; the report adds up (the bytes of a full sync, what was sent, the buckets); buckets
stay within the bucket size; a tensor whose elements all changed goes whole; a receiver's error reaches the
caller; a bucket whose bytes do not match its digest is refused, and the next send is a full one.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any, ClassVar

import pytest
import torch

from rlcore.api import (
    BucketChecksumError,
    CheckpointEngineConfig,
    PluginManager,
    RLCoreError,
    TransportReport,
    WeightBucket,
    resolve_bucket,
)


class MemoryReceiver:
    """An engine's receive side in memory: the weights it holds (cast to ``dtype`` when given, as an engine
    casts what it is given), its weight version, the buckets it was given."""

    def __init__(self, partial: bool = True, dtype: torch.dtype | None = None) -> None:
        self.weights: dict[str, torch.Tensor] = {}
        self.buckets: list[WeightBucket] = []
        self._version = 0
        self._partial = partial
        self._dtype = dtype

    @property
    def version(self) -> int:
        """One more after every load."""
        return self._version

    @property
    def partial(self) -> bool:
        """Whether the engine keeps the weights an update leaves out."""
        return self._partial

    @property
    def dtype(self) -> torch.dtype | None:
        """The dtype the engine holds its weights in (None: the trainer's)."""
        return self._dtype

    def load(self, buckets: Iterator[WeightBucket], *, full: bool) -> None:
        """Copy every bucket's tensors in (its deltas applied to the weights held, its digest checked); a full
        update must name every weight held."""
        received: dict[str, torch.Tensor] = {}
        for bucket in buckets:
            self.buckets.append(WeightBucket(list(bucket.tensors), bucket.digest, list(bucket.deltas)))  # a copy
            for name, tensor in resolve_bucket(bucket, self.weights):
                received[name] = tensor.detach().to(self._dtype or tensor.dtype, copy=True)
        if full and self.weights and set(received) != set(self.weights):
            raise RLCoreError(f"a full update named {sorted(received)}, the engine holds {sorted(self.weights)}")
        if not full and not self._partial:
            raise RLCoreError("this engine takes full updates only")
        self.weights.update(received)
        self._version += 1


class CorruptingReceiver(MemoryReceiver):
    """A receiver whose buckets arrive with one value changed on the way while ``corrupt`` is set."""

    corrupt = True

    def load(self, buckets: Iterator[WeightBucket], *, full: bool) -> None:
        """Change the first tensor of every bucket before it is checked."""
        super().load((self._damaged(bucket) for bucket in buckets), full=full)

    def _damaged(self, bucket: WeightBucket) -> WeightBucket:
        """``bucket`` with one byte of its first whole tensor (or of its first delta's values) changed."""
        if not self.corrupt:
            return bucket
        if bucket.tensors:
            name, tensor = bucket.tensors[0]
            tensor = tensor.clone()
            tensor.view(-1)[0] += 1
            return WeightBucket([(name, tensor), *bucket.tensors[1:]], bucket.digest, bucket.deltas)
        name, delta = bucket.deltas[0]
        values = delta.values.clone()
        values[0] += 1
        return WeightBucket([], bucket.digest, [(name, replace(delta, values=values)), *bucket.deltas[1:]])


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


def small_update(weights: dict[str, torch.Tensor], step: int) -> dict[str, torch.Tensor]:
    """``weights`` after an optimizer-sized step: every float32 element moves by about 1e-3 of its size (in
    bfloat16 only the elements that cross a rounding step change); ``layers.0.bias`` stays as it is."""
    generator = torch.Generator().manual_seed(1000 + step)
    moved = {}
    for name, tensor in weights.items():
        noise = torch.randn(tensor.shape, generator=generator) * 1e-3
        moved[name] = tensor if name == "layers.0.bias" else (tensor.float() * (1 + noise)).to(tensor.dtype)
    return moved


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
        """The engine holds exactly the trainer's names and bytes, in its own dtype (else the trainer's)."""
        assert set(receiver.weights) == set(weights)
        for name, tensor in weights.items():
            held, expected = receiver.weights[name], tensor.to(receiver.dtype or tensor.dtype)
            assert held.dtype == expected.dtype, name
            assert torch.equal(held.reshape(-1).view(torch.uint8), expected.reshape(-1).view(torch.uint8)), name

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
        weights, receiver = trainer_weights(), MemoryReceiver()
        self.send(transport, weights, receiver)
        self.send(transport, small_update(weights, 1), receiver)
        for bucket in receiver.buckets:
            size = sum(t.numel() * t.element_size() for _, t in bucket.tensors)
            size += sum(delta.nbytes for _, delta in bucket.deltas)
            entries = len(bucket.tensors) + len(bucket.deltas)
            assert size <= self.BUCKET_BYTES or entries == 1, [name for name, _ in bucket.tensors + bucket.deltas]

    @pytest.mark.parametrize("dtype", [None, torch.bfloat16], ids=["trainer-dtype", "bf16-engine"])
    def test_small_updates_leave_what_a_full_sync_leaves(self, transport: Any, dtype: torch.dtype | None) -> None:
        weights, receiver = trainer_weights(), MemoryReceiver(dtype=dtype)
        self.send(transport, weights, receiver)
        for step in range(1, 4):  # optimizer-sized steps: a few elements change in bf16, most in float32
            weights = small_update(weights, step)
            report = self.send(transport, weights, receiver)
            assert report.bytes_sent <= report.bytes_full
            self.assert_engine_holds(receiver, weights)
        full = MemoryReceiver(dtype=dtype)
        self.send(type(transport)(transport.config), weights, full)
        for name, tensor in full.weights.items():
            assert torch.equal(receiver.weights[name].view(torch.uint8), tensor.view(torch.uint8)), name

    def test_a_tensor_whose_elements_all_changed_goes_whole(self, transport: Any) -> None:
        weights, receiver = trainer_weights(), MemoryReceiver()
        self.send(transport, weights, receiver)
        receiver.buckets.clear()
        updated = {**weights, "head.weight": weights["head.weight"] + 1}
        self.send(transport, updated, receiver)
        assert any(name == "head.weight" for bucket in receiver.buckets for name, _ in bucket.tensors)
        assert all(name != "head.weight" for bucket in receiver.buckets for name, _ in bucket.deltas)
        self.assert_engine_holds(receiver, updated)

    def test_a_bucket_that_arrives_changed_is_refused_and_the_next_send_is_full(self, transport: Any) -> None:
        """A bucket with a digest whose bytes changed on the way is refused; the next send is full and exact
        (a transport without digests cannot notice, and must send everything every time)."""
        weights, receiver = trainer_weights(), CorruptingReceiver()
        receiver.corrupt = False
        self.send(transport, weights, receiver)
        receiver.buckets.clear()
        receiver.corrupt = True
        updated = small_update(weights, 1)
        try:
            self.send(transport, updated, receiver)
            refused = False
        except BucketChecksumError as exc:
            assert "do not match" in str(exc)
            refused = True
        assert refused == any(bucket.digest is not None for bucket in receiver.buckets)
        receiver.corrupt = False
        report = self.send(transport, updated, receiver)
        assert report.full and report.bytes_sent == report.bytes_full
        self.assert_engine_holds(receiver, updated)

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
