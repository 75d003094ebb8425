"""Map rlcore's rollout sampling settings onto vLLM's ``SamplingParams`` keyword arguments.

Kept free of vllm imports so the mapping can be read and tested on its own; the engine builds
``vllm.SamplingParams(**kwargs)`` from the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rlcore.api import SamplingParams

__all__ = ["vllm_sampling_kwargs"]


def vllm_sampling_kwargs(
    params: SamplingParams,
    *,
    max_tokens: int,
    logprobs: bool,
    ignore_eos: bool,
    stop_token_ids: Sequence[int],
) -> dict[str, Any]:
    """Keyword arguments for one request's ``vllm.SamplingParams``.

    - Greedy decoding (``do_sample=false`` or ``temperature=0``) becomes vLLM's greedy mode:
      ``temperature=0`` with top-k and top-p off, as verl maps it.
    - ``top_k <= 0`` means "off", which vLLM spells ``0``.
    - One sample per request (``n=1``): the controller repeats prompts ``rollout.n`` times itself.
    - ``max_tokens`` is the response length; responses stop at any of ``stop_token_ids`` (the
      tokenizer's and the generation config's EOS ids) unless ``ignore_eos``.
    - ``logprobs=0`` asks for the sampled token's log-prob only (the engine is started with
      ``logprobs_mode="processed_logprobs"`` so it is taken after the temperature is applied).
    - Tokens are not detokenized: rlcore works on ids, and detokenizing costs CPU time.
    """
    greedy = params.greedy
    return {
        "n": 1,
        "temperature": 0.0 if greedy else params.temperature,
        "top_p": 1.0 if greedy else params.top_p,
        "top_k": 0 if greedy or params.top_k <= 0 else params.top_k,
        "max_tokens": max_tokens,
        "min_tokens": 0,
        "ignore_eos": ignore_eos,
        "stop_token_ids": [] if ignore_eos else [int(token) for token in stop_token_ids],
        "logprobs": 0 if logprobs else None,
        "detokenize": False,
        "skip_special_tokens": False,
    }
