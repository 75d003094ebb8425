"""Sequence packing (``model.use_remove_padding``): the attended tokens of a micro-batch in one row.

A micro-batch of left-padded prompts and right-padded responses ``[B, P + R]`` becomes one row
``(1, nnz)`` holding only the tokens whose ``attention_mask`` is 1, with position ids that restart at 0
for every sequence, and the length of every sequence. The model is called without an attention mask,
inside :func:`rlcore.modelkit.packed_attention.packed_forward`: each layer attends causally within each
sequence from those lengths, and no ``nnz × nnz`` mask is built, so no token attends across sequences.
Only the ``k`` outputs that predict response tokens are kept and scattered back into ``[B, R]``.

With a ``multiple`` (verl's ``pad_to_length`` with its ``pad_to_length_bucket``) the row is padded at its end
up to a multiple of that many tokens, so that kernels see few distinct shapes: the padding is a sequence of
its own (positions 0, 1, 2, …), attends only to itself and is never kept, so the outputs are unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from rlcore.api.batch import Batch
from rlcore.config.keys import select
from rlcore.errors import RLCoreError

if TYPE_CHECKING:
    from omegaconf import DictConfig


@dataclass(frozen=True)
class PackedBatch:
    """One packed micro-batch.

    Attributes:
        input_ids: ``(1, nnz)`` the attended tokens of every row, row after row.
        position_ids: ``(1, nnz)`` their positions, restarting at 0 for each row.
        keep_index: ``(k,)`` packed positions whose outputs predict a response token (the token before
            it), in row-major order of those response tokens.
        rows: ``(k,)`` the response token's row in the ``[B, R]`` response layout.
        cols: ``(k,)`` its column there.
        shape: ``(B, R)``.
        lengths: the attended tokens of each row (its sequence's length in the packed row; 0 for a row
            without any), then the end padding's length when there is some.
        padding: the tokens appended at the end of the row to round it up to the multiple (0 without).
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    keep_index: torch.Tensor
    rows: torch.Tensor
    cols: torch.Tensor
    shape: tuple[int, int]
    lengths: tuple[int, ...]
    padding: int = 0

    def unpack(self, values: torch.Tensor) -> torch.Tensor:
        """``[B, R, ...]`` from per-kept-output ``values`` ``(k, ...)``; positions without a prediction are 0."""
        out = values.new_zeros((*self.shape, *values.shape[1:]))
        out[self.rows, self.cols] = values
        return out


def pack_batch(batch: Batch, key: str, multiple: int = 1) -> PackedBatch:
    """Pack ``batch`` (``input_ids``, ``attention_mask``, ``position_ids``, ``responses``) into one row, padded
    at its end up to a multiple of ``multiple`` tokens (the padding: token id 0, a sequence of its own).

    The response token at column ``c`` of a row is predicted by the output at the token before it; that
    output is kept when both tokens are attended (``attention_mask`` 1). ``position_ids`` must count
    0, 1, 2, … over each row's attended tokens, as rollouts produce them
    (``cumsum(attention_mask) − 1``); otherwise the sequence boundaries could not be recovered and an
    :class:`RLCoreError` naming ``key`` (the ``use_remove_padding`` setting) is raised.
    """
    mask = batch["attention_mask"].bool()
    position_ids = batch["position_ids"]
    if position_ids.dim() != 2:
        raise RLCoreError(f"{key}=true needs 2-D position_ids [B, T], got shape {tuple(position_ids.shape)}")
    rows_count, total = mask.shape
    response_length = batch["responses"].shape[1]
    prompt_length = total - response_length
    if prompt_length < 1:
        raise RLCoreError(f"{key}=true needs at least one prompt column before the responses")
    lengths = mask.sum(-1)
    positions = position_ids[mask]
    starts = torch.repeat_interleave(lengths.cumsum(0) - lengths, lengths)
    expected = torch.arange(positions.numel(), device=positions.device) - starts
    if not torch.equal(positions, expected.to(positions.dtype)):
        raise RLCoreError(
            f"{key}=true needs position_ids that count 0, 1, 2, ... over each sequence's attended tokens "
            "(cumsum(attention_mask) - 1); these do not, so packed sequences cannot be separated"
        )
    packed_index = mask.flatten().long().cumsum(0).view(rows_count, total) - 1
    predicts = mask[:, prompt_length - 1 : total - 1] & mask[:, prompt_length:]
    rows, cols = predicts.nonzero(as_tuple=True)
    padding = -positions.numel() % multiple
    tail = torch.arange(padding, device=positions.device, dtype=positions.dtype)
    ids = batch["input_ids"][mask]
    return PackedBatch(
        input_ids=torch.cat([ids, ids.new_zeros(padding)]).unsqueeze(0),
        position_ids=torch.cat([positions, tail]).unsqueeze(0),
        keep_index=packed_index[:, prompt_length - 1 : total - 1][predicts],
        rows=rows,
        cols=cols,
        shape=(rows_count, response_length),
        lengths=(*lengths.tolist(), *([padding] if padding else [])),
        padding=padding,
    )


def pad_multiple(config: DictConfig, section: str, model_section: str) -> int:
    """The multiple the packed micro-batches of the engine at ``section`` are padded to: its
    ``pad_to_length_bucket`` with ``pad_to_length`` (verl's keys), else 1. ``pad_to_length`` without
    ``{model_section}.use_remove_padding`` (nothing is packed) and a bucket that is not a positive integer are
    errors naming the key."""
    if not select(config, f"{section}.pad_to_length", False):
        return 1
    bucket = select(config, f"{section}.pad_to_length_bucket", 1024)
    if isinstance(bucket, bool) or not isinstance(bucket, int) or bucket < 1:
        raise RLCoreError(f"{section}.pad_to_length_bucket must be a positive integer, got {bucket!r}")
    if not select(config, f"{model_section}.use_remove_padding", False):
        raise RLCoreError(
            f"{section}.pad_to_length=true pads packed micro-batches: it needs {model_section}.use_remove_padding=true"
        )
    return bucket
