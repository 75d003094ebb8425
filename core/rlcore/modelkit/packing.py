"""Sequence packing (``model.use_remove_padding``): the attended tokens of a micro-batch in one row.

A micro-batch of left-padded prompts and right-padded responses ``[B, P + R]`` becomes one row
``(1, nnz)`` holding only the tokens whose ``attention_mask`` is 1, with position ids that restart at 0
for every sequence, and the length of every sequence. The model is called without an attention mask,
inside :func:`rlcore.modelkit.packed_attention.packed_forward`: each layer attends causally within each
sequence from those lengths, and no ``nnz × nnz`` mask is built, so no token attends across sequences.
Only the ``k`` outputs that predict response tokens are kept and scattered back into ``[B, R]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlcore.api.batch import Batch
from rlcore.errors import RLCoreError


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
            without any).
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    keep_index: torch.Tensor
    rows: torch.Tensor
    cols: torch.Tensor
    shape: tuple[int, int]
    lengths: tuple[int, ...]

    def unpack(self, values: torch.Tensor) -> torch.Tensor:
        """``[B, R, ...]`` from per-kept-output ``values`` ``(k, ...)``; positions without a prediction are 0."""
        out = values.new_zeros((*self.shape, *values.shape[1:]))
        out[self.rows, self.cols] = values
        return out


def pack_batch(batch: Batch, key: str) -> PackedBatch:
    """Pack ``batch`` (``input_ids``, ``attention_mask``, ``position_ids``, ``responses``) into one row.

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
    return PackedBatch(
        input_ids=batch["input_ids"][mask].unsqueeze(0),
        position_ids=positions.unsqueeze(0),
        keep_index=packed_index[:, prompt_length - 1 : total - 1][predicts],
        rows=rows,
        cols=cols,
        shape=(rows_count, response_length),
        lengths=tuple(lengths.tolist()),
    )
