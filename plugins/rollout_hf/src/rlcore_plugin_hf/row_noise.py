"""Per-row sampling randomness for the HF engine: counter-based, so it is independent of how rows are batched.

Every row of a generate call has its own seed (:func:`rlcore.api.request_seeds` of the engine's
seed, the call's index and the row's index). The Gumbel draws ``G = -log(-log U)`` that
:func:`rlcore_plugin_hf.sampler.sample_next_tokens` adds to the logits are not drawn from a generator: the
uniform ``U`` of row ``r``, decoding step ``t`` and vocabulary entry ``v`` is a hash of ``(seed_r, t, v)``,
computed for all rows at once with integer tensor ops. A row's tokens therefore depend only on its prompt,
the weights and its seed — splitting a call into chunks, padding it to a batch-size bucket or reordering it
samples the same tokens — and a decoding step costs the same fixed number of kernel launches for any
number of rows (and runs inside a CUDA graph: no host-side state).

The hash, in two stages:

- **step keys** (once per chunk, ``[B, R]``): ``splitmix64(seed_r + (t + 1) * φ64)``, kept to its low 32
  bits — one 32-bit key per row and step;
- **draws** (every step, ``[B, V]``): ``x = key ^ (v * φ32)`` mixed by the two multiply-xorshift rounds of
  a 32-bit integer hash ("lowbias32"); the top 23 bits ``m`` of the result give ``U = (m + ½) / 2²³``,
  which lies strictly inside (0, 1), so both logarithms are finite.

Every step is integer arithmetic modulo 2⁶⁴ or 2³² — torch's int64/int32 multiplication wraps on every
device, and right shifts of signed values are masked to be logical — so ``U`` is bit-identical on CPU and
CUDA; ``G`` goes through two float32 logarithms, whose last bit may differ between devices.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch

__all__ = ["RowNoise", "block_steps", "offset_seed", "step_keys", "uniform_draws", "vocab_codes"]

_GOLDEN64 = 0x9E3779B97F4A7C15
_SPLITMIX1 = 0xBF58476D1CE4E5B9
_SPLITMIX2 = 0x94D049BB133111EB
_GOLDEN32 = 0x9E3779B9
_LOWBIAS1 = 0x7FEB352D
_LOWBIAS2 = 0x846CA68B
#: ``U = m · 2⁻²³ + (½ + 2⁻²⁴)`` for the signed top bits ``m = x >> 9`` in ``[-2²², 2²²)``: ``(m + 2²² + ½) / 2²³``
_UNIFORM_SCALE = 2.0**-23
_UNIFORM_OFFSET = 0.5 + 2.0**-24
#: the most draws per row that one eager block holds (``block x vocab``); a block is at least one step
MAX_BLOCK_DRAWS = 1 << 16


def _signed(value: int, bits: int) -> int:
    """``value`` modulo ``2**bits`` as a two's-complement signed integer (a torch integer scalar)."""
    value %= 1 << bits
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def _shr(x: torch.Tensor, shift: int, bits: int) -> torch.Tensor:
    """Logical right shift of a signed ``bits``-wide integer tensor (torch's ``>>`` is arithmetic)."""
    return (x >> shift) & ((1 << (bits - shift)) - 1)


def _low32(x: torch.Tensor) -> torch.Tensor:
    """The low 32 bits of an int64 tensor as int32 (converted exactly, without relying on overflow)."""
    low = x & 0xFFFFFFFF
    return ((low ^ 0x80000000) - 0x80000000).to(torch.int32)


def block_steps(vocab_size: int, response_length: int) -> int:
    """Decoding steps drawn at once by an eager :class:`RowNoise`: as many as fit in
    :data:`MAX_BLOCK_DRAWS` per row, at least 1. It depends only on the vocabulary size and the response
    length, never on the number of rows, so a step costs the same ops for any batch."""
    return max(1, min(response_length, MAX_BLOCK_DRAWS // max(1, vocab_size)))


def offset_seed(seed: int, offset: int) -> int:
    """The seed whose step ``t`` draws what step ``offset + t`` of ``seed`` draws (a signed int64): the
    step keys hash ``seed + (t + 1) · φ64``, so shifting the seed by ``offset · φ64`` shifts the steps.
    A row continued after ``offset`` tokens (partial rollout) samples with it exactly as it would have
    sampled uninterrupted."""
    return _signed(seed + offset * _GOLDEN64, 64)


def step_keys(seeds: torch.Tensor, steps: int) -> torch.Tensor:
    """The 32-bit key of every row and decoding step: int32 ``[B, steps]`` for int64 row ``seeds [B]``.

    ``splitmix64(seed + (t + 1) · φ64)`` (the generator's output for counter ``t + 1``), low 32 bits.
    """
    counters = torch.arange(1, steps + 1, dtype=torch.int64, device=seeds.device) * _signed(_GOLDEN64, 64)
    z = seeds[:, None] + counters
    z = (z ^ _shr(z, 30, 64)) * _signed(_SPLITMIX1, 64)
    z = (z ^ _shr(z, 27, 64)) * _signed(_SPLITMIX2, 64)
    return _low32(z ^ _shr(z, 31, 64))


@functools.lru_cache(maxsize=8)
def vocab_codes(vocab_size: int, device: torch.device) -> torch.Tensor:
    """``v · φ32`` modulo 2³² for every vocabulary entry: int32 ``[V]`` (computed once per vocabulary and
    device; read, never written)."""
    return _low32(torch.arange(vocab_size, dtype=torch.int64, device=device) * _GOLDEN32)


class _HashConstants:
    """The hash's constants as 0-dim int32 tensors on one device (a Python int operand would be converted
    to a tensor at every op); one instance per device (:func:`_constants_on`)."""

    def __init__(self, device: torch.device) -> None:
        def const(value: int) -> torch.Tensor:
            return torch.tensor(_signed(value, 32), dtype=torch.int32, device=device)

        self.shift16, self.mask16 = const(16), const(0xFFFF)
        self.shift15, self.mask15 = const(15), const(0x1FFFF)
        self.shift9 = const(9)
        self.offset = torch.tensor(_UNIFORM_OFFSET, dtype=torch.float32, device=device)
        self.mix1, self.mix2 = const(_LOWBIAS1), const(_LOWBIAS2)


@functools.lru_cache(maxsize=8)
def _constants_on(device: torch.device) -> _HashConstants:
    """The hash's constants on ``device`` (made once)."""
    return _HashConstants(device)


def uniform_draws(keys: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
    """The uniforms ``U`` (float32, in (0, 1)) of the int32 row ``keys`` (``[B, 1]`` for one step, ``[B, S,
    1]`` for ``S`` steps) and the vocabulary ``codes [V]`` (:func:`vocab_codes`): ``[B, V]`` or ``[B, S,
    V]``. Exact integer arithmetic up to an exact float scaling."""
    c = _constants_on(codes.device)
    x = codes ^ keys
    shifted = torch.empty_like(x)  # the one scratch tensor: every other step works in place
    for shift, mask, mix in ((c.shift16, c.mask16, c.mix1), (c.shift15, c.mask15, c.mix2)):
        torch.bitwise_right_shift(x, shift, out=shifted)
        x ^= shifted.bitwise_and_(mask)
        x *= mix
    x >>= c.shift9
    # one pass: x (|x| < 2**22) converts exactly and x·2⁻²³ is exact, so only the sum rounds
    return torch.add(c.offset, x, alpha=_UNIFORM_SCALE, out=shifted.view(torch.float32))


class RowNoise:
    """Gumbel draws ``[rows, V]`` for each decoding step, from each row's seed, in buffers of fixed shape.

    :meth:`gumbel` takes the step either as a device tensor — the step's draws are computed from it, no
    host value is read, a CUDA graph can replay it — or as a host int, when ``block`` steps are drawn at
    once every ``block`` steps (fewer, larger ops when decoding eagerly). The values are the same.

    Args:
        rows: the rows drawn for (a chunk, possibly padded to a batch-size bucket).
        vocab_size: ``V``, the width of the logits.
        steps: the most decoding steps a row takes (the response length).
        device: where the draws are made.
        block: steps drawn at once for host-int steps (default :func:`block_steps`).
    """

    def __init__(self, rows: int, vocab_size: int, steps: int, device: torch.device, block: int | None = None) -> None:
        self.keys = torch.zeros((rows, steps), dtype=torch.int32, device=device)
        self.codes = vocab_codes(vocab_size, device)
        self.block = block or block_steps(vocab_size, steps)
        self._draws = torch.empty(0)

    def seed(self, seeds: Sequence[int]) -> None:
        """Key the first ``len(seeds)`` rows by ``seeds`` (each a signed int64: a seed in ``[0, 2**63)`` or
        one shifted by :func:`offset_seed`), in place; rows after them (padding) draw from seed 0."""
        values = torch.zeros(self.keys.shape[0], dtype=torch.int64)
        values[: len(seeds)] = torch.tensor([int(seed) for seed in seeds], dtype=torch.int64)
        self.keys.copy_(step_keys(values.to(self.keys.device), self.keys.shape[1]))

    def step_keys(self, step: torch.Tensor | int) -> torch.Tensor:
        """The rows' int32 keys ``[rows]`` of decoding step ``step`` (a one-element int64 device tensor, or
        a host int): what :func:`uniform_draws` hashes with the vocabulary codes."""
        if isinstance(step, torch.Tensor):
            return self.keys.index_select(1, step).view(-1)
        return self.keys[:, step].contiguous()

    def gumbel(self, step: torch.Tensor | int) -> torch.Tensor:
        """The draws of decoding step ``step``, ``[rows, V]`` float32, in a fixed number of ops whatever
        the number of rows: ``step`` an int64 tensor of one element on the device (read there), or a host
        int (steps then taken in order from 0, drawn a block at a time)."""
        if isinstance(step, torch.Tensor):
            return _gumbel(uniform_draws(self.keys.index_select(1, step), self.codes))
        offset = step % self.block
        if offset == 0:
            keys = self.keys[:, step : step + self.block, None]
            self._draws = _gumbel(uniform_draws(keys, self.codes))
        return self._draws[:, offset]


def _gumbel(uniform: torch.Tensor) -> torch.Tensor:
    """``-log(-log U)``, in place."""
    return uniform.log_().neg_().log_().neg_()
