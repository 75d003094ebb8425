"""The position encodings of a :class:`~rlcore.api.transport.SparseDelta`: which elements of a tensor changed, as
a byte stream (uint8), vectorised in torch (no Python loop over elements).

- ``gaps``: the gaps between consecutive changed flat indices (the first counted from -1, so every gap is at
  least 1), each minus one as an unsigned LEB128 varint: 7 bits a byte, the high bit set on every byte but a
  number's last. A gap of up to 128 elements costs 1 byte, up to 16,384 2 bytes, and so on.
- ``mask``: one bit per element (element ``i`` is bit ``i % 8`` of byte ``i // 8``), ``ceil(numel / 8)`` bytes.

:func:`encode_positions` picks the smaller of the two for a tensor; :func:`decode_positions` returns the flat
indices, refusing a stream that does not describe ``count`` positions inside the tensor.
"""

from __future__ import annotations

import torch

__all__ = ["ENCODINGS", "PositionError", "decode_positions", "encode_positions"]

#: the position encodings a delta may carry
ENCODINGS = ("gaps", "mask")

#: the most bytes one varint may take: 9 x 7 bits hold any gap of an int64 index
_MAX_VARINT_BYTES = 9


class PositionError(ValueError):
    """A position stream that does not describe the delta's elements (the message says what is wrong)."""


def _varint_lengths(numbers: torch.Tensor) -> torch.Tensor:
    """The bytes each non-negative int64 of ``numbers`` takes as a LEB128 varint (1 to 9)."""
    lengths = torch.ones_like(numbers)
    for bits in range(7, 7 * _MAX_VARINT_BYTES, 7):
        lengths += numbers >= (1 << bits)
    return lengths


def _pack_varints(numbers: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``numbers`` (non-negative int64) as one LEB128 stream, given each one's byte count ``lengths``."""
    ends = lengths.cumsum(0)
    owner = torch.repeat_interleave(torch.arange(numbers.numel()), lengths)
    offset = torch.arange(int(ends[-1])) - (ends - lengths)[owner]
    groups = (numbers[owner] >> (7 * offset)) & 0x7F
    return (groups | ((offset < lengths[owner] - 1).long() << 7)).to(torch.uint8)


def _unpack_varints(stream: torch.Tensor) -> torch.Tensor:
    """The int64 numbers of a LEB128 ``stream`` (uint8); raises :class:`PositionError` for a stream that ends
    inside a number or holds a number longer than 9 bytes."""
    data = stream.long()
    last = (data & 0x80) == 0
    if data.numel() and not bool(last[-1]):
        raise PositionError("its position stream ends inside a number")
    ends = last.nonzero().squeeze(1)
    owner = last.long().cumsum(0) - last.long()
    starts = torch.cat([ends.new_zeros(1), ends[:-1] + 1])
    offset = torch.arange(data.numel()) - starts[owner]
    if offset.numel() and int(offset.max()) >= _MAX_VARINT_BYTES:
        raise PositionError(f"its position stream holds a number longer than {_MAX_VARINT_BYTES} bytes")
    return torch.zeros(ends.numel(), dtype=torch.long).index_add_(0, owner, (data & 0x7F) << (7 * offset))


#: one multiply gathers the low bit of each of 8 bytes (a uint64, little-endian) into its top byte: byte ``j`` lands on
#: bit ``56 + j`` (every product term falls on a bit of its own, so nothing carries)
_GATHER_BITS = 0x0102040810204080
#: byte value -> its 8 bits, lowest first (the mask's unpacking table)
_BYTE_BITS = ((torch.arange(256).unsqueeze(1) >> torch.arange(8)) & 1).bool()


def _pack_mask(changed: torch.Tensor) -> torch.Tensor:
    """The bool vector ``changed`` as bits, 8 to a byte (element ``i``: bit ``i % 8`` of byte ``i // 8``)."""
    padded = torch.cat([changed, changed.new_zeros(-changed.numel() % 8)])
    return ((padded.view(torch.uint8).view(torch.int64) * _GATHER_BITS) >> 56).to(torch.uint8)


def _unpack_mask(stream: torch.Tensor, numel: int) -> torch.Tensor:
    """The flat indices of the set bits of a ``mask`` stream for ``numel`` elements; raises
    :class:`PositionError` for a stream of the wrong length or with bits set past ``numel``."""
    if stream.numel() != -(-numel // 8):
        raise PositionError(f"its mask has {stream.numel()} bytes, not the {-(-numel // 8)} of its elements")
    flat = _BYTE_BITS[stream.long()].view(-1)
    if bool(flat[numel:].any()):
        raise PositionError(f"its mask marks positions outside its {numel} elements")
    return flat[:numel].nonzero().squeeze(1)


def encode_positions(changed: torch.Tensor) -> tuple[str, torch.Tensor, torch.Tensor]:
    """The changed elements of a flat bool vector ``changed`` (at least one set) as ``(encoding, stream,
    indices)``: the smaller of the ``gaps`` and ``mask`` streams (uint8; ``gaps`` on a tie), and the flat
    indices it encodes (int64, ascending), to pick the values with."""
    numel = changed.numel()
    mask_bytes = -(-numel // 8)
    indices = changed.nonzero().squeeze(1)
    if indices.numel() <= mask_bytes:  # past that many, gaps (at least a byte each) are the larger
        gaps = indices.diff(prepend=indices.new_full((1,), -1)) - 1
        lengths = _varint_lengths(gaps)
        if int(lengths.sum()) <= mask_bytes:
            return "gaps", _pack_varints(gaps, lengths), indices
    return "mask", _pack_mask(changed), indices


def decode_positions(encoding: str, stream: torch.Tensor, numel: int, count: int) -> torch.Tensor:
    """The flat indices (int64, ascending) that ``stream`` (uint8, in ``encoding``) marks in a tensor of
    ``numel`` elements; raises :class:`PositionError` unless there are exactly ``count`` of them, all inside it."""
    if stream.dtype != torch.uint8:
        raise PositionError(f"its positions are {stream.dtype}, not a uint8 stream")
    if encoding == "mask":
        indices = _unpack_mask(stream, numel)
    elif encoding == "gaps":
        gaps = _unpack_varints(stream)
        if gaps.numel() and int(gaps.max()) >= numel:
            raise PositionError(f"its positions fall outside its {numel} elements")
        indices = (gaps + 1).cumsum(0) - 1
        if indices.numel() and int(indices[-1]) >= numel:
            raise PositionError(f"its positions fall outside its {numel} elements")
    else:
        raise PositionError(f"its position encoding {encoding!r} is none of {', '.join(ENCODINGS)}")
    if indices.numel() != count:
        raise PositionError(f"its positions mark {indices.numel()} elements for {count} values")
    return indices
