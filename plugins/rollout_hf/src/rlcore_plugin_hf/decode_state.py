"""The tensors of the HF engine's decoding loop over one chunk, with fixed shapes, and one sampling step on them.

A :class:`DecodeState` holds, for ``rows`` rows (a chunk, padded up to its batch-size bucket when steps
run as CUDA graphs), the last sampled tokens, their positions, the cache slot and step counters, the key
mask, the sampled responses and log-probs, the rows still running and the rows' noise keys. When
``graphed``, every counter lives on the device and every write goes through an index tensor, so a step
(:meth:`DecodeState.take`, and the static decoder's forward before it) reads no host value and the same
tensors at every step: it can be captured once and replayed, and the buffers are reused for every chunk
of the same shape (:meth:`DecodeState.start`). Eagerly the step and slot are counted on the host (plain
slice writes, fewer ops on CPU); the sampled values are the same.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence

import torch

from rlcore.api import SamplingParams
from rlcore_plugin_hf.row_noise import RowNoise, vocab_codes
from rlcore_plugin_hf.sampler import sample_next_tokens
from rlcore_plugin_hf.static_decoder import StaticDecoder

__all__ = ["DecodeState", "fused_sampler"]


def fused_sampler(device: torch.device) -> Callable[..., tuple[torch.Tensor, torch.Tensor]] | None:
    """The one-kernel sampler (:func:`rlcore_plugin_hf.sampling_kernel.fused_sample`) on a CUDA ``device``
    when triton is installed, else None (the torch sampler)."""
    if device.type != "cuda" or importlib.util.find_spec("triton") is None:
        return None
    from rlcore_plugin_hf.sampling_kernel import fused_sample

    return fused_sample


class DecodeState:
    """Static buffers of a decoding loop over ``rows`` rows.

    Args:
        rows: the rows decoded together (padding rows included).
        response_length: ``R``, the most tokens a row samples.
        vocab_size: the width of the logits.
        params: the sampling of this loop (greedy draws no noise).
        cache_len: the KV cache's positions per row (the key mask's width), or None for a loop that
            does not run through the static decoder (its steps come from :meth:`take` alone).
        eos_ids: the end-of-sequence token ids (int64, on the device).
        stop_on_eos: whether rows stop at an EOS (tracked in :attr:`unfinished`).
        with_logprobs: whether the sampled tokens' log-probs are stored.
        graphed: whether steps are replayed as CUDA graphs: the step and the cache slot are then device
            counters that every step reads and advances; otherwise they are counted on the host.
        device: where the buffers live.
    """

    def __init__(
        self,
        rows: int,
        response_length: int,
        vocab_size: int,
        params: SamplingParams,
        *,
        cache_len: int | None,
        eos_ids: torch.Tensor,
        stop_on_eos: bool,
        with_logprobs: bool,
        graphed: bool,
        device: torch.device,
    ) -> None:
        self.rows = rows
        self.params = params
        self.eos_ids = eos_ids
        self.stop_on_eos = stop_on_eos
        self.tokens = torch.zeros(rows, dtype=torch.long, device=device)
        self.positions = torch.zeros(rows, dtype=torch.long, device=device)
        self.slot = torch.zeros(1, dtype=torch.long, device=device)
        self.step = torch.zeros(1, dtype=torch.long, device=device)
        self.key_mask = torch.zeros((rows, cache_len or 0), dtype=torch.bool, device=device)
        self.responses = torch.zeros((rows, response_length), dtype=torch.long, device=device)
        self.logprobs = (
            torch.zeros((rows, response_length), dtype=torch.float32, device=device) if with_logprobs else None
        )
        self.unfinished = torch.ones(rows, dtype=torch.bool, device=device)
        self.graphed = graphed
        self.noise = None if params.greedy else RowNoise(rows, vocab_size, response_length, device)
        # on CUDA with triton a step samples in one kernel (rlcore_plugin_hf.sampling_kernel)
        self._fused = fused_sampler(device)
        self._codes = vocab_codes(vocab_size, device) if self._fused is not None else None
        self._index = 0  # tokens taken, counted on the host (eager only: a graph replay does not count)
        self._width = 0  # the chunk's prompt width

    def start(self, seeds: Sequence[int], prompt_mask: torch.Tensor, next_positions: torch.Tensor) -> None:
        """Reset the counters for a chunk of ``B = len(prompt_mask)`` rows with prompts of width ``P``:
        step 0, slot ``P``, ``next_positions [B]`` (each row's first response position), every row
        running, the key mask ``prompt_mask [B, P]`` then true (padding rows: true after ``P`` only), and
        the rows' noise keyed by ``seeds`` (empty when greedy)."""
        real, width = prompt_mask.shape
        self.step.zero_()
        self._index = 0
        self._width = width
        self.slot.fill_(width)
        self.positions.zero_()
        self.positions[:real] = next_positions
        self.unfinished.fill_(True)
        if self.key_mask.shape[1]:
            self.key_mask.fill_(True)
            self.key_mask[:, :width] = False
            self.key_mask[:real, :width] = prompt_mask.bool()
        if self.noise is not None:
            self.noise.seed(seeds)

    def take(self, logits: torch.Tensor) -> None:
        """Sample this step's token of every row from ``logits [rows, V]`` (fewer rows: the first ones, the
        rest padded), store it and its log-prob at the current step, mark rows that emitted EOS as
        finished and advance the step; a fixed number of ops, no host reads. Graphed, the step is the
        device counter :attr:`step`; eagerly, the host's count."""
        if logits.shape[0] < self.rows:
            logits = torch.cat([logits, logits.new_zeros(self.rows - logits.shape[0], logits.shape[1])])
        step = self.step if self.graphed else self._index
        tokens: torch.Tensor
        logprobs: torch.Tensor | None
        if self._fused is not None:  # CUDA with triton: one kernel reads the logits once
            keys = None if self.noise is None else self.noise.step_keys(step)
            tokens, logprobs = self._fused(logits, self.params, keys, self._codes)
        else:
            tokens, logprobs = sample_next_tokens(
                logits,
                self.params,
                None,
                with_logprobs=self.logprobs is not None,
                gumbel=None if self.noise is None else self.noise.gumbel(step),
            )
        if self.graphed:
            self.responses.index_copy_(1, self.step, tokens[:, None])
            if self.logprobs is not None and logprobs is not None:
                self.logprobs.index_copy_(1, self.step, logprobs[:, None])
            self.step.add_(1)
        else:
            self.responses[:, self._index] = tokens
            if self.logprobs is not None and logprobs is not None:
                self.logprobs[:, self._index] = logprobs
        if self.stop_on_eos:
            self.unfinished.logical_and_((tokens[:, None] == self.eos_ids).any(dim=-1).logical_not_())
        if self.graphed:  # a graph reads and writes the same tensors at every step
            self.tokens.copy_(tokens)
        else:
            self.tokens = tokens
        self._index += 1

    def decode_with(self, decoder: StaticDecoder, read: int | None = None) -> None:
        """One decoding step through the static ``decoder``: forward the last tokens at their positions
        into the current cache slot, advance both, and :meth:`take` the next tokens. Graphed, the slot is
        the device counter :attr:`slot` and the first ``read`` cache positions (the step's read-length
        bucket, :func:`rlcore_plugin_hf.chunking.read_length`; None: the whole cache) are attended under the
        mask (static shapes); eagerly, the slot is counted on the host and only the filled positions are
        attended."""
        if self.graphed:
            logits = decoder.decode(self.tokens, self.positions, self.slot, self.key_mask, read)
            self.slot.add_(1)
        else:
            logits = decoder.decode(self.tokens, self.positions, self._width + self._index - 1, self.key_mask)
        self.positions.add_(1)
        self.take(logits)
