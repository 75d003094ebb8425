"""The HF engine's counter-based sampling noise (:mod:`rlcore_plugin_hf.row_noise`): the integer hash equals an
independent reference in exact Python integers, its uniforms lie strictly inside (0, 1) and look uniform
and independent, a row's draws depend only on its seed and the step (not on the other rows, padding or the
block size), and on CUDA they are bit-identical to the CPU's."""

from __future__ import annotations

import math

import pytest
import torch
from rlcore_plugin_hf.row_noise import MAX_BLOCK_DRAWS, RowNoise, block_steps, step_keys, uniform_draws, vocab_codes

MASK64 = (1 << 64) - 1
MASK32 = (1 << 32) - 1
SEEDS = [0, 1, 2**63 - 1, 123_456_789_012_345_678, 2**40 + 17]


def reference_key(seed: int, step: int) -> int:
    """splitmix64 of ``seed + (step + 1) * φ64`` in Python integers, low 32 bits."""
    z = (seed + (step + 1) * 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return (z ^ (z >> 31)) & MASK32


def reference_uniform(key: int, token: int) -> float:
    """The documented hash of ``(key, token)`` in Python integers: two lowbias32 rounds, the top 23 bits
    read as a signed number, offset to ``(m + ½) / 2²³``."""
    x = ((token * 0x9E3779B9) & MASK32) ^ key
    x = ((x ^ (x >> 16)) * 0x7FEB352D) & MASK32
    x = ((x ^ (x >> 15)) * 0x846CA68B) & MASK32
    top = x >> 9
    signed = top - (1 << 23) if top >= 1 << 22 else top
    return (signed + (1 << 22) + 0.5) / 2**23


def noise(seeds: list[int], vocab: int, steps: int, block: int | None = None, rows: int | None = None) -> RowNoise:
    """A seeded :class:`RowNoise` on the CPU."""
    drawn = RowNoise(rows or len(seeds), vocab, steps, torch.device("cpu"), block)
    drawn.seed(seeds)
    return drawn


def test_hash_equals_the_reference_in_python_integers() -> None:
    """Keys and uniforms are exactly the reference's, for extreme seeds and every token of a small vocab."""
    keys = step_keys(torch.tensor(SEEDS, dtype=torch.int64), 6)
    assert keys.dtype == torch.int32
    for row, seed in enumerate(SEEDS):
        assert [key & MASK32 for key in keys[row].tolist()] == [reference_key(seed, step) for step in range(6)]
    uniform = uniform_draws(keys[:, 3:4], vocab_codes(700, torch.device("cpu")))
    for row, seed in enumerate(SEEDS):
        assert uniform[row].tolist() == [reference_uniform(reference_key(seed, 3), token) for token in range(700)]


def test_uniforms_are_open_interval_uniform_and_uncorrelated() -> None:
    """Over 64 rows x 4096 tokens: inside (0, 1), moments and a 64-bin histogram as for U(0, 1), no
    correlation between neighbouring tokens, rows or steps."""
    drawn = noise(list(range(1000, 1064)), 4096, 3)
    first = uniform_draws(drawn.keys[:, 1:2], drawn.codes)
    second = uniform_draws(drawn.keys[:, 2:3], drawn.codes)
    assert float(first.min()) > 0 and float(first.max()) < 1
    count = first.numel()
    assert abs(float(first.mean()) - 0.5) < 4 / math.sqrt(12 * count)
    assert abs(float(first.var()) - 1 / 12) < 1e-3
    counts = torch.histc(first, bins=64, min=0, max=1)
    chi2 = float(((counts - count / 64) ** 2 / (count / 64)).sum())
    assert chi2 < 63 + 6 * math.sqrt(2 * 63)

    def correlation(a: torch.Tensor, b: torch.Tensor) -> float:
        return float(torch.corrcoef(torch.stack([a.flatten(), b.flatten()]))[0, 1])

    limit = 5 / math.sqrt(count)
    assert abs(correlation(first[:, :-1], first[:, 1:])) < limit
    assert abs(correlation(first[:-1], first[1:])) < limit
    assert abs(correlation(first, second)) < limit


def test_gumbel_draws_have_the_gumbel_moments() -> None:
    """``-log(-log U)`` has mean γ and variance π²/6 (finite everywhere)."""
    gumbel = noise(list(range(32)), 8192, 1).gumbel(torch.tensor([0]))
    assert bool(torch.isfinite(gumbel).all())
    assert abs(float(gumbel.mean()) - 0.5772157) < 0.01
    assert abs(float(gumbel.var()) - math.pi**2 / 6) < 0.03


def test_a_rows_draws_depend_only_on_its_seed_and_step() -> None:
    """Reordering, dropping or padding rows, the block size, and the step given on the device or on the
    host change no row's draws."""
    seeds = [11, 22, 33, 44, 55]
    vocab, steps = 300, 9
    whole = noise(seeds, vocab, steps, block=1)
    reordered = noise(seeds[::-1], vocab, steps, block=4)
    alone = noise([seeds[2]], vocab, steps)
    padded = noise(seeds[:2], vocab, steps, block=3, rows=8)
    for step in range(steps):
        expected = whole.gumbel(step)
        assert torch.equal(whole.gumbel(torch.tensor([step])), expected)
        assert torch.equal(reordered.gumbel(step), expected.flip(0))
        assert torch.equal(alone.gumbel(step)[0], expected[2])
        assert torch.equal(padded.gumbel(torch.tensor([step]))[:2], expected[:2])
        assert not torch.equal(expected[0], expected[1])
    assert not torch.equal(whole.gumbel(torch.tensor([0])), whole.gumbel(torch.tensor([1])))


def test_block_steps_depends_on_the_vocabulary_and_length_only() -> None:
    """Eager blocks hold at most MAX_BLOCK_DRAWS draws per row, at least one step, at most the response."""
    assert block_steps(443, 128) == 128
    assert block_steps(448, 1000) == MAX_BLOCK_DRAWS // 448
    assert block_steps(MAX_BLOCK_DRAWS * 2, 128) == 1


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="compares CUDA with the CPU")
def test_cuda_draws_equal_the_cpu_draws() -> None:
    """On CUDA the keys and uniforms are bit-identical to the CPU's; the Gumbel draws agree to float32."""
    cpu = noise(SEEDS, 151_936, 5)
    cuda = RowNoise(len(SEEDS), 151_936, 5, torch.device("cuda"))
    cuda.seed(SEEDS)
    assert torch.equal(cuda.keys.cpu(), cpu.keys)
    for step in range(5):
        index = torch.tensor([step])
        cpu_uniform = uniform_draws(cpu.keys[:, step : step + 1], cpu.codes)
        cuda_uniform = uniform_draws(cuda.keys[:, step : step + 1], cuda.codes)
        assert torch.equal(cuda_uniform.cpu(), cpu_uniform)
        torch.testing.assert_close(cuda.gumbel(index.cuda()).cpu(), cpu.gumbel(index), rtol=1e-6, atol=1e-6)
