"""The built-in weight transports pass the weight-transport contract suite (rlcore_testkit); the ``delta``
transport's element-level encoding."""

from __future__ import annotations

import pytest
import torch
from rlcore_testkit.contracts import WeightTransportContract
from rlcore_testkit.contracts.transport import MemoryReceiver, small_update, trainer_weights

from rlcore.api import BucketChecksumError, CheckpointEngineConfig, SparseDelta, WeightBucket
from rlcore.rollout.transport import DeltaTransport, apply_delta, encode_delta, resolve_bucket


class TestNaive(WeightTransportContract):
    component_name = "naive"


class TestDelta(WeightTransportContract):
    component_name = "delta"


def test_delta_sends_the_changed_bf16_elements_as_indices_and_values() -> None:
    """An optimizer-sized step of bf16 weights: few elements change, they go as deltas, and the bytes add up."""
    weights, receiver = trainer_weights(), MemoryReceiver(dtype=torch.bfloat16)
    transport = DeltaTransport(CheckpointEngineConfig(backend="delta"))
    first = transport.send(iter(weights.items()), receiver, None)
    assert first.full and first.bytes_full == sum(t.numel() * 2 for t in weights.values())
    receiver.buckets.clear()
    updated = small_update(weights, 1)
    report = transport.send(iter(updated.items()), receiver, None)
    (bucket,) = receiver.buckets
    assert not report.full and {name for name, _ in bucket.deltas} >= {"head.weight", "embed.weight"}
    assert "layers.0.bias" not in {name for name, _ in bucket.tensors + bucket.deltas}  # unchanged: not sent
    whole = sum(t.numel() * t.element_size() for _, t in bucket.tensors)
    assert report.bytes_sent == whole + sum(delta.nbytes for _, delta in bucket.deltas) < report.bytes_full / 2
    for name, delta in bucket.deltas:
        changed = updated[name].to(torch.bfloat16).view(torch.int16) != weights[name].to(torch.bfloat16).view(
            torch.int16
        )
        assert delta.values.numel() == int(changed.sum()) and delta.positions.dtype == torch.uint8, name
    assert report.metrics["actor/weight_sync_delta_fraction"] == report.bytes_sent / report.bytes_full
    assert report.metrics["actor/weight_sync_encode_s"] > 0


def test_delta_sends_every_float32_tensor_whole_when_every_element_moved() -> None:
    weights, receiver = trainer_weights(), MemoryReceiver()
    transport = DeltaTransport(CheckpointEngineConfig(backend="delta"))
    transport.send(iter(weights.items()), receiver, None)
    receiver.buckets.clear()
    updated = {name: t + 1 if t.dtype == torch.float32 else t for name, t in weights.items()}
    report = transport.send(iter(updated.items()), receiver, None)
    (bucket,) = receiver.buckets
    assert not bucket.deltas and {name for name, _ in bucket.tensors} == {
        "embed.weight",
        "head.weight",
        "layers.0.bias",
    }
    assert report.bytes_sent == sum(updated[name].numel() * 4 for name, _ in bucket.tensors)


def test_a_delta_is_encoded_only_where_smaller_and_applies_bit_exactly() -> None:
    base = torch.randn(1000).to(torch.bfloat16)
    new = base.clone()
    assert encode_delta(new, base) is None
    new[[3, 999]] = torch.tensor([7.0, -0.0], dtype=torch.bfloat16)  # -0.0 differs from 0.0 in its bytes only
    base[999] = 0.0
    delta = encode_delta(new, base)
    assert isinstance(delta, SparseDelta) and delta.encoding == "gaps"
    assert delta.positions.tolist() == [3, 0x80 | (995 & 0x7F), 995 >> 7]  # gaps less one: 3, then 995 in 2 bytes
    assert delta.nbytes == 3 + 2 * 2
    assert torch.equal(apply_delta(base, delta, "w").view(torch.int16), new.view(torch.int16))
    dense = base + 1  # every element: the whole tensor is smaller than a mask and 1000 values
    assert encode_delta(dense, base) is dense


@pytest.mark.parametrize(
    ("snapshot", "delta", "message"),
    [
        ({}, SparseDelta((4,), "gaps", torch.tensor([1], dtype=torch.uint8), torch.ones(1)), "holds no copy of it"),
        (
            {"w": torch.zeros(4)},
            SparseDelta((2, 2), "gaps", torch.tensor([1], dtype=torch.uint8), torch.ones(1)),
            r"shape \(2, 2\)",
        ),
        (
            {"w": torch.zeros(4)},
            SparseDelta((4,), "gaps", torch.tensor([9], dtype=torch.uint8), torch.ones(1)),
            "outside its 4",
        ),
        (
            {"w": torch.zeros(4)},
            SparseDelta((4,), "gaps", torch.tensor([1, 0], dtype=torch.uint8), torch.ones(1)),
            "2 elements for 1 values",
        ),
        (
            {"w": torch.zeros(4)},
            SparseDelta((4,), "gaps", torch.tensor([0x81], dtype=torch.uint8), torch.ones(1)),
            "ends inside a number",
        ),
        (
            {"w": torch.zeros(4)},
            SparseDelta((4,), "gaps", torch.tensor([0x80] * 9 + [1], dtype=torch.uint8), torch.ones(1)),
            "longer than 9 bytes",
        ),
        (
            {"w": torch.zeros(12)},
            SparseDelta((12,), "mask", torch.tensor([1], dtype=torch.uint8), torch.ones(1)),
            "1 bytes, not the 2",
        ),
        (
            {"w": torch.zeros(4)},
            SparseDelta((4,), "mask", torch.tensor([0x11], dtype=torch.uint8), torch.ones(2)),
            "outside its 4",
        ),
        (
            {"w": torch.zeros(4)},
            SparseDelta((4,), "runs", torch.tensor([1], dtype=torch.uint8), torch.ones(1)),
            "'runs' is none of gaps, mask",
        ),
        (
            {"w": torch.zeros(4)},
            SparseDelta((4,), "gaps", torch.tensor([1], dtype=torch.int64), torch.ones(1)),
            "torch.int64, not a uint8",
        ),
    ],
    ids=[
        "no-snapshot",
        "shape",
        "index",
        "count",
        "truncated",
        "too-long",
        "mask-size",
        "mask-padding",
        "encoding",
        "dtype",
    ],
)
def test_a_delta_that_does_not_fit_the_snapshot_is_refused(
    snapshot: dict[str, torch.Tensor], delta: SparseDelta, message: str
) -> None:
    with pytest.raises(BucketChecksumError, match=rf"'w'.*{message}|{message}.*'w'"):
        resolve_bucket(WeightBucket([], None, [("w", delta)]), snapshot)
