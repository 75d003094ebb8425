"""Map rlcore's rollout sampling settings onto SGLang's per-request ``sampling_params`` dictionaries.

Kept free of sglang imports so the mapping can be read and tested anywhere (SGLang needs CUDA).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rlcore.api import SamplingParams

__all__ = ["sglang_sampling_params"]


def sglang_sampling_params(
    params: SamplingParams,
    *,
    max_new_tokens: int,
    ignore_eos: bool,
    stop_token_ids: Sequence[int],
    seed: int | None,
) -> dict[str, Any]:
    """One request's ``sampling_params`` for ``sglang.Engine.generate``.

    - Greedy decoding (``do_sample=false`` or ``temperature=0``) is temperature 0 with top-k and top-p
      off; SGLang turns that into top-k 1.
    - ``top_k <= 0`` means "off", which SGLang spells ``-1``.
    - One sample per request (``n=1``): the controller repeats prompts ``rollout.n`` times itself.
    - Responses stop at any of ``stop_token_ids`` unless ``ignore_eos``; ``seed`` (None for greedy)
      becomes SGLang's per-request ``sampling_seed``.
    """
    greedy = params.greedy
    sampling: dict[str, Any] = {
        "n": 1,
        "temperature": 0.0 if greedy else params.temperature,
        "top_p": 1.0 if greedy else params.top_p,
        "top_k": -1 if greedy or params.top_k <= 0 else params.top_k,
        "max_new_tokens": max_new_tokens,
        "ignore_eos": ignore_eos,
        "stop_token_ids": [] if ignore_eos else [int(token) for token in stop_token_ids],
        "skip_special_tokens": False,
        "no_stop_trim": True,
    }
    if seed is not None:
        sampling["sampling_seed"] = seed
    return sampling
