"""Shared-prompt forward (``actor.use_prefix_grouper``): the ``n`` responses of a prompt attend to one copy of it.

A GRPO batch holds each prompt ``n`` times, once per sampled response, and the plain forward computes the
prompt's hidden states ``n`` times. Here adjacent rows whose prompt part (tokens, attention mask and position
ids) is identical form a *group*, and each group runs as one row laid out as

    [ prompt (P columns, left-padded) | response 1 (R columns) | response 2 | … | response n ]

with a 4-D attention mask in which a prompt token sees the earlier prompt tokens, and a token of response
``j`` sees the prompt and the earlier tokens of response ``j`` only; padding is seen by no token and sees only
itself (so no softmax row is empty). Every token keeps the position id it has in the plain layout, so the
rotary embeddings, and with them every per-token result and gradient, are those of the plain forward, to
float tolerance. The prompt's tokens are computed once per group instead of ``n`` times: ``P + n·R`` tokens
instead of ``n·(P + R)``.

The output at the prompt's last column predicts the first token of every response of the group; the
output at column ``r`` of response ``j`` predicts its token ``r + 1``. :func:`grouped_logits` gathers them
back into the ``[B, R]`` layout of the batch.

The one-row layout (rather than a key/value cache of the prompt expanded to its responses) is what keeps
activation checkpointing on: transformers drops the cache of checkpointed layers in training. It needs an
attention that takes a 4-D mask (``sdpa`` or ``eager``) and a model whose layers all attend to the full
causal context (no sliding-window layers).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from rlcore.api.batch import Batch
from rlcore.config.keys import select
from rlcore.errors import RLCoreError

#: the attention implementations of transformers that take a ready 4-D mask
MASKED_ATTENTION = ("sdpa", "eager")


def grouper_key(config: Any, role: str, section: str) -> str | None:
    """``{section}.use_prefix_grouper`` when the engine of ``role`` runs the shared-prompt forward: the actor's
    forwards (old log-probs and the update) with the setting on; None otherwise."""
    key = f"{section}.use_prefix_grouper"
    return key if role == "actor" and select(config, key) is True else None


def prompt_groups(batch: Batch) -> list[tuple[int, int]]:
    """``(first row, row count)`` of each run of adjacent rows of ``batch`` that share their prompt: the same
    tokens, attention mask and position ids in the ``P = T − R`` prompt columns. Rows of one prompt that are
    not adjacent form groups of their own (still exact, but computed once per run)."""
    prompt_length = batch["input_ids"].shape[1] - batch["responses"].shape[1]
    rows = len(batch)
    if rows == 0:
        return []
    parts = (batch["input_ids"], batch["attention_mask"], batch["position_ids"])
    same = torch.ones(rows - 1, dtype=torch.bool, device=batch["input_ids"].device)
    for part in parts:
        prompt = part[:, :prompt_length].reshape(rows, -1)
        same &= (prompt[1:] == prompt[:-1]).all(-1)
    starts = [0, *(torch.nonzero(~same).flatten() + 1).tolist()]
    return [(start, stop - start) for start, stop in zip(starts, [*starts[1:], rows])]


def check_model(model: nn.Module, key: str) -> str:
    """The attention implementation of ``model``; a model the grouped layout cannot run exactly is refused,
    naming ``key``: an attention that ignores a 4-D mask (flash attention) or sliding-window layers (the mask
    gives every layer the full context)."""
    get_base_model = getattr(model, "get_base_model", None)
    base = get_base_model() if callable(get_base_model) else model
    config: Any = getattr(getattr(base, "module", base), "config", None)
    if config is None:
        raise RLCoreError(f"{key}=true needs a Hugging Face causal LM, got {type(base).__name__}")
    attention = getattr(config, "_attn_implementation", None) or "eager"
    if attention not in MASKED_ATTENTION:
        raise RLCoreError(
            f"{key}=true runs the shared prompt with a 4-D attention mask, which the {attention!r} attention "
            f"ignores; use one of {', '.join(MASKED_ATTENTION)} (actor_rollout_ref.model.override_config."
            "attn_implementation)"
        )
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if "sliding_attention" in (getattr(text, "layer_types", None) or ()) or getattr(text, "use_sliding_window", False):
        raise RLCoreError(
            f"{key}=true: the model has sliding-window attention layers, which the shared layout does not keep"
        )
    return str(attention)


def _layout(batch: Batch, groups: list[tuple[int, int]]) -> tuple[torch.Tensor, ...]:
    """The grouped rows ``[G, L]`` (``L = P + n_max·R``): input ids, position ids, attended (bool) and segment
    (0 the prompt, ``j + 1`` response ``j``, −1 unused columns)."""
    input_ids, mask, positions = batch["input_ids"], batch["attention_mask"].bool(), batch["position_ids"]
    total, length = input_ids.shape[1], batch["responses"].shape[1]
    prompt = total - length
    most = max(size for _, size in groups)
    width = prompt + most * length
    shape = (len(groups), width)
    ids = input_ids.new_zeros(shape)
    pos = positions.new_zeros(shape)
    attended = torch.zeros(shape, dtype=torch.bool, device=input_ids.device)
    segment = torch.full(shape, -1, dtype=torch.long, device=input_ids.device)
    for g, (start, size) in enumerate(groups):
        stop, end = start + size, prompt + size * length
        ids[g, :prompt], ids[g, prompt:end] = input_ids[start, :prompt], input_ids[start:stop, prompt:].flatten()
        pos[g, :prompt], pos[g, prompt:end] = positions[start, :prompt], positions[start:stop, prompt:].flatten()
        attended[g, :prompt], attended[g, prompt:end] = mask[start, :prompt], mask[start:stop, prompt:].flatten()
        segment[g, :prompt] = 0
        segment[g, prompt:end] = torch.arange(1, size + 1, device=segment.device).repeat_interleave(length)
    return ids, pos, attended, segment


def _attention_mask(attended: torch.Tensor, segment: torch.Tensor, eager: bool, dtype: torch.dtype) -> torch.Tensor:
    """``[G, 1, L, L]``: query ``q`` sees key ``k ≤ q`` when ``k`` is attended and in the prompt or in ``q``'s own
    response; every position also sees itself. Boolean (True: attend) or, for ``eager`` attention, additive."""
    width = attended.shape[1]
    causal = torch.ones(width, width, dtype=torch.bool, device=attended.device).tril()
    keys_segment = segment[:, None, :]
    same_part = (keys_segment == 0) | (keys_segment == segment[:, :, None])
    allowed = causal & attended[:, None, :] & same_part
    allowed |= torch.eye(width, dtype=torch.bool, device=attended.device)
    allowed = allowed.unsqueeze(1)
    if not eager:
        return allowed
    zero = torch.zeros((), dtype=dtype, device=attended.device)
    return torch.where(allowed, zero, torch.finfo(dtype).min)


def _response_index(
    groups: list[tuple[int, int]], prompt: int, length: int, kept: int, device: torch.device
) -> torch.Tensor:
    """``[B, R]`` indices into the flattened kept outputs ``[G·kept]`` (kept = columns ``P − 1 …`` of each grouped
    row): column 0 of every row is its group's last prompt output, column ``r ≥ 1`` of the group's row ``j`` the
    output at response ``j``'s column ``r − 1``."""
    rows = []
    steps = torch.arange(length - 1, device=device)
    for g, (_, size) in enumerate(groups):
        base = g * kept
        first = torch.full((size, 1), base, dtype=torch.long, device=device)
        rest = base + 1 + torch.arange(size, device=device)[:, None] * length + steps[None, :]
        rows.append(torch.cat([first, rest], dim=1))
    return torch.cat(rows)


def grouped_logits(model: nn.Module, batch: Batch, keep: bool, key: str) -> torch.Tensor:
    """``[B, R, V]`` logits that predict ``batch["responses"]``, from one forward of each group's shared prompt and
    its responses (see the module docstring); ``keep``: ``model`` takes ``logits_to_keep``. ``key`` (the setting)
    is named in errors."""
    eager = check_model(model, key) == "eager"
    length = batch["responses"].shape[1]
    prompt = batch["input_ids"].shape[1] - length
    if prompt < 1 or length < 1:
        raise RLCoreError(f"{key}=true needs at least one prompt and one response column")
    groups = prompt_groups(batch)
    ids, positions, attended, segment = _layout(batch, groups)
    dtype = next(model.parameters()).dtype
    mask = _attention_mask(attended, segment, eager, dtype)
    kept = ids.shape[1] - prompt + 1
    kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": mask, "position_ids": positions, "use_cache": False}
    if keep:
        kwargs["logits_to_keep"] = kept
    logits = model(**kwargs).logits
    if not keep:
        logits = logits[:, prompt - 1 :]
    index = _response_index(groups, prompt, length, kept, logits.device)
    return logits.reshape(-1, logits.shape[-1])[index]
