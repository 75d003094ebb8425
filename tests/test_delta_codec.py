"""The position encodings of the ``delta`` weight transport (``rlcore.rollout.delta_codec``) at their boundaries:
varint gaps across a byte, the first and last element, every or no element changed, a bitmask once it is the
smaller, and one changed element in a large tensor; every delta applies bit for bit."""

from __future__ import annotations

import pytest
import torch

from rlcore.api import SparseDelta
from rlcore.rollout.delta_codec import decode_positions, encode_positions
from rlcore.rollout.transport import apply_delta, encode_delta


def changed_at(numel: int, indices: list[int]) -> torch.Tensor:
    """A flat bool vector of ``numel`` elements, set at ``indices``."""
    changed = torch.zeros(numel, dtype=torch.bool)
    changed[indices] = True
    return changed


def varint_bytes(number: int) -> int:
    """The bytes of ``number`` as a LEB128 varint, counted by hand: 7 bits a byte, at least one."""
    return max(1, -(-number.bit_length() // 7))


def assert_round_trip(new: torch.Tensor, base: torch.Tensor) -> SparseDelta:
    """``new`` against ``base`` encodes to a delta that rebuilds ``new``'s exact bytes from ``base``."""
    delta = encode_delta(new, base)
    assert isinstance(delta, SparseDelta)
    rebuilt = apply_delta(base, delta, "w")
    assert torch.equal(rebuilt.reshape(-1).view(torch.uint8), new.reshape(-1).view(torch.uint8))
    return delta


@pytest.mark.parametrize("gap", [1, 2, 127, 128, 129, 255, 256, 257, 16384, 16385])
def test_a_gap_takes_one_more_byte_past_each_7_bits(gap: int) -> None:
    """Gaps are stored less one: up to 128 in one byte, 129 to 16,384 in two, then three."""
    numel = 3 * gap + 1000
    indices = [gap - 1, 2 * gap - 1, 3 * gap - 1]  # the first counted from -1: every gap is ``gap``
    encoding, stream, picked = encode_positions(changed_at(numel, indices))
    assert encoding == "gaps" and picked.tolist() == indices
    assert stream.numel() == 3 * varint_bytes(gap - 1)
    assert decode_positions("gaps", stream, numel, 3).tolist() == indices


def test_the_first_and_the_last_element() -> None:
    base = torch.randn(100_000).to(torch.bfloat16)
    new = base.clone()
    new[[0, -1]] += 1
    delta = assert_round_trip(new, base)
    assert delta.encoding == "gaps" and delta.positions.numel() == 1 + varint_bytes(100_000 - 2)
    assert delta.positions[0] == 0 and delta.nbytes == delta.positions.numel() + 2 * 2


def test_no_change_sends_nothing_and_every_change_sends_the_tensor() -> None:
    base = torch.randn(4096).to(torch.bfloat16)
    assert encode_delta(base.clone(), base) is None
    every = base + 1
    assert encode_delta(every, base) is every
    encoding, stream, picked = encode_positions(torch.ones(4096, dtype=torch.bool))
    assert encoding == "mask" and stream.tolist() == [0xFF] * 512 and picked.numel() == 4096


def test_the_mask_is_picked_once_smaller_than_the_gaps() -> None:
    """Every 8th element changed: one gap byte each, as many as the mask's bytes (gaps on the tie); every 4th:
    two gap bytes per mask byte, so the mask."""
    eighth = encode_positions(torch.arange(800) % 8 == 7)
    assert eighth[0] == "gaps" and eighth[1].numel() == 100
    fourth = encode_positions(torch.arange(800) % 4 == 3)
    assert fourth[0] == "mask" and fourth[1].tolist() == [0b10001000] * 100
    assert torch.equal(decode_positions("mask", fourth[1], 800, 200), fourth[2])


def test_the_mask_holds_element_i_in_bit_i_mod_8_of_byte_i_div_8() -> None:
    encoding, stream, _ = encode_positions(changed_at(10, [0, 3, 9]))
    assert encoding == "mask" and stream.tolist() == [0b00001001, 0b00000010]  # 3 gap bytes > 2 mask bytes


def test_one_changed_element_of_a_large_tensor_costs_a_few_bytes() -> None:
    numel = 1 << 24
    base = torch.zeros(numel, dtype=torch.bfloat16)
    new = base.clone()
    new[numel - 5] = 1.0
    delta = assert_round_trip(new, base)
    assert delta.encoding == "gaps" and delta.nbytes == varint_bytes(numel - 5) + 2 == 6


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64, torch.int8])
@pytest.mark.parametrize("fraction", [0.001, 0.04, 0.13, 0.3])
def test_random_changes_rebuild_the_exact_bytes(dtype: torch.dtype, fraction: float) -> None:
    generator = torch.Generator().manual_seed(7)
    base = (torch.randn(5003, generator=generator) * 50).to(dtype)
    new = base.clone()
    changed = torch.rand(5003, generator=generator) < fraction
    new[changed] = (torch.randn(int(changed.sum()), generator=generator) * 50).to(dtype)
    if dtype.is_floating_point:
        new[0] = -0.0 if base[0] != 0 or not base[0].signbit() else 0.0  # the sign of zero is a byte change
    delta = assert_round_trip(new, base)
    assert delta.encoding == ("mask" if fraction > 0.1 else "gaps")


def test_nan_payloads_and_the_sign_of_zero_survive() -> None:
    base = torch.zeros(1000)
    new = base.clone()
    bits = new.view(torch.int32)
    bits[[5, 500]] = torch.tensor([0x7FC00001, -0x00400001], dtype=torch.int32)  # two distinct NaN payloads
    new[999] = -0.0
    delta = assert_round_trip(new, base)
    assert delta.encoding == "gaps" and delta.values.numel() == 3
