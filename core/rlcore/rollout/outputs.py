"""What every rollout engine shares around its sampler: the served dtype, special tokens, prompt checks and
the output Batch.

An engine reads left-padded prompts and returns right-padded responses in one documented layout
(``HFRolloutEngine.generate`` describes it); these helpers keep that layout, the error messages and the
end-of-sequence handling identical across engines.
"""

from __future__ import annotations

import numbers
from typing import Any

import torch

from rlcore.api.batch import Batch
from rlcore.config.keys import ROLLOUT_KEY
from rlcore.dtypes import parse_dtype
from rlcore.errors import RLCoreError

__all__ = ["SpecialTokens", "check_left_padded", "engine_dtype", "rollout_output", "row_token_caps"]

#: the ``extra_info`` entry of a data row that caps its response's new tokens (a per-prompt budget)
ROW_CAP_KEY = "max_new_tokens"


def engine_dtype(dtype: torch.dtype | str) -> torch.dtype:
    """A ``torch.dtype`` from a dtype, its name (``"bfloat16"``, ``"float32"``, ...) or a short alias
    (``"bf16"``), by :func:`rlcore.dtypes.parse_dtype`; errors name ``actor_rollout_ref.rollout.dtype``."""
    return parse_dtype(dtype, f"{ROLLOUT_KEY}.dtype")


def _token_ids(value: Any) -> list[int]:
    """A token id, a list of them or None, as a list."""
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    return [int(v) for v in value]


class SpecialTokens:
    """The end-of-sequence ids and the pad id an engine uses, from the tokenizer and the generation config.

    EOS ids are the union of the tokenizer's and the generation config's. The pad id is the tokenizer's,
    else the generation config's, else the first EOS id; with none of them an :class:`RLCoreError` is raised.
    """

    def __init__(self, tokenizer: Any, generation_config: Any = None) -> None:
        eos = _token_ids(getattr(tokenizer, "eos_token_id", None))
        eos += _token_ids(getattr(generation_config, "eos_token_id", None))
        self.eos_token_ids: list[int] = sorted(set(eos))
        pad = getattr(tokenizer, "pad_token_id", None)
        if pad is None:
            pad = getattr(generation_config, "pad_token_id", None)
        if pad is None and self.eos_token_ids:
            pad = self.eos_token_ids[0]
        if pad is None:
            raise RLCoreError(
                "the tokenizer defines neither pad_token_id nor eos_token_id; the rollout cannot pad responses"
            )
        self.pad_token_id = int(pad)


def check_left_padded(batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The prompts' ``(input_ids, attention_mask, position_ids)``, the last two filled in when absent.

    Raises :class:`RLCoreError` when a row's last column is padding: engines need left-padded prompts.
    """
    prompts = batch["input_ids"]
    mask = batch["attention_mask"] if "attention_mask" in batch else torch.ones_like(prompts)
    if prompts.numel() and not bool(mask[:, -1].all()):
        raise RLCoreError(
            "rollout prompts must be left-padded (the last prompt column is padding in some rows); "
            "load the tokenizer with padding_side='left'"
        )
    positions = batch["position_ids"] if "position_ids" in batch else (mask.long().cumsum(-1) - 1).clamp_(min=0)
    return prompts, mask, positions


def row_token_caps(batch: Batch, response_length: int) -> torch.Tensor | None:
    """Each row's cap on new tokens: ``extra_info["max_new_tokens"]`` of the row (a per-prompt budget, e.g. the
    long-tailed task's), ``response_length`` for rows without one and never above it; an int64 ``[B]`` tensor,
    or None when no row has a cap. A cap that is not a positive integer raises :class:`RLCoreError` naming the
    row. An engine stops decoding a row at its cap, as at ``response_length``."""
    infos = batch.non_tensors.get("extra_info")
    if infos is None or not any(isinstance(info, dict) and ROW_CAP_KEY in info for info in infos):
        return None
    caps = []
    for row, info in enumerate(infos):
        cap = info.get(ROW_CAP_KEY, response_length) if isinstance(info, dict) else response_length
        if isinstance(cap, bool) or not isinstance(cap, numbers.Integral) or cap < 1:
            raise RLCoreError(f"extra_info.{ROW_CAP_KEY} of rollout row {row} must be a positive integer, got {cap!r}")
        caps.append(min(int(cap), response_length))
    return torch.tensor(caps, dtype=torch.long)


def rollout_output(
    batch: Batch,
    responses: torch.Tensor,
    response_mask: torch.Tensor,
    log_probs: torch.Tensor | None,
) -> Batch:
    """The Batch an engine returns for the prompts in ``batch`` and their sampled ``responses [B, R]``.

    Holds ``prompts``, ``responses``, ``response_mask`` (in the prompt mask's dtype), ``input_ids`` and
    ``attention_mask`` over prompt + response, ``position_ids = clip(cumsum(attention_mask) - 1, 0)``
    and, when given, ``rollout_log_probs``; all on the prompts' device. Non-tensors are copied; ``meta``
    is the input's with ``metrics`` replaced by ``{"rollout/gen_tokens": ...}``.
    """
    prompts = batch["input_ids"]
    device = prompts.device
    prompt_mask = batch["attention_mask"] if "attention_mask" in batch else torch.ones_like(prompts)
    responses = responses.to(device)
    response_mask = response_mask.to(device=device, dtype=prompt_mask.dtype)
    attention_mask = torch.cat([prompt_mask, response_mask], dim=-1)
    tensors = {
        "prompts": prompts,
        "responses": responses,
        "response_mask": response_mask,
        "input_ids": torch.cat([prompts, responses], dim=-1),
        "attention_mask": attention_mask,
        "position_ids": (attention_mask.long().cumsum(-1) - 1).clamp_(min=0),
    }
    if log_probs is not None:
        tensors["rollout_log_probs"] = log_probs.to(device)
    meta = {key: value for key, value in batch.meta.items() if key != "metrics"}
    meta["metrics"] = {"rollout/gen_tokens": int(response_mask.sum())}
    return Batch(tensors, {key: value.copy() for key, value in batch.non_tensors.items()}, meta)
