"""Per-row sampling randomness for the HF engine, independent of how the rows are batched.

Every row of a generate call gets its own seed (:func:`rlcore.rollout.sampling.request_seeds` of the
engine's seed, the call's index and the row's index) and its own ``torch.Generator``. The Gumbel draws
``G = -log(-log U)`` that :func:`rlcore.rollout.sampling.sample_next_tokens` adds to the logits are drawn
row by row in blocks of decoding steps, so a row's tokens depend only on its prompt, the
weights and its seed: splitting a batch into chunks (``rollout.max_num_batched_tokens``) or reordering it
samples the same tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["RowNoise", "block_steps"]

#: the most draws one row holds at once (``block x vocab``); a block is at least one step
MAX_BLOCK_DRAWS = 1 << 16


def block_steps(vocab_size: int, response_length: int) -> int:
    """Decoding steps drawn per row at once: as many as fit in :data:`MAX_BLOCK_DRAWS`, at least 1.

    It depends only on the vocabulary size and the response length (never on the batch), so a row
    draws the same numbers in the same order however the batch is chunked.
    """
    return max(1, min(response_length, MAX_BLOCK_DRAWS // max(1, vocab_size)))


class RowNoise:
    """Gumbel draws ``[B, V]`` for each decoding step, from one generator per row.

    Args:
        seeds: one seed per row.
        vocab_size: ``V``, the width of the logits.
        block: steps drawn per row at once (:func:`block_steps`).
        device: where the generators and draws live.
    """

    def __init__(self, seeds: Sequence[int], vocab_size: int, block: int, device: torch.device) -> None:
        self.generators = [torch.Generator(device=device).manual_seed(int(seed)) for seed in seeds]
        self.vocab_size = vocab_size
        self.block = block
        self.device = device
        self._draws = torch.empty(0)

    def step(self, step: int) -> torch.Tensor:
        """The draws of decoding step ``step`` (steps are taken in order from 0), ``[B, V]`` float32."""
        offset = step % self.block
        if offset == 0:
            shape = (self.block, self.vocab_size)
            uniform = torch.stack(
                [torch.rand(shape, generator=g, device=self.device, dtype=torch.float32) for g in self.generators]
            )
            self._draws = uniform.log_().neg_().log_().neg_()
        return self._draws[:, offset]
