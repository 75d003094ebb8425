"""The mapping of rlcore's sampling settings onto vLLM's."""

from __future__ import annotations

from typing import Any

import pytest
from rlcore_plugin_vllm.sampling import vllm_sampling_kwargs

from rlcore.rollout.sampling import SamplingParams, request_seeds


def kwargs_for(params: SamplingParams, **overrides: object) -> dict[str, object]:
    """The mapping with the usual request settings."""
    settings = {"max_tokens": 16, "logprobs": True, "ignore_eos": False, "stop_token_ids": [2, 7]} | overrides
    return vllm_sampling_kwargs(params, **settings)


def test_sampling_settings_pass_through() -> None:
    """temperature, top-p and top-k reach vLLM unchanged; one sample per request; no detokenizing."""
    kwargs = kwargs_for(SamplingParams(temperature=0.7, top_k=20, top_p=0.9))
    assert kwargs["temperature"] == 0.7 and kwargs["top_p"] == 0.9 and kwargs["top_k"] == 20
    assert kwargs["n"] == 1 and kwargs["max_tokens"] == 16 and kwargs["min_tokens"] == 0
    assert kwargs["stop_token_ids"] == [2, 7] and kwargs["ignore_eos"] is False
    assert kwargs["logprobs"] == 0 and kwargs["detokenize"] is False


@pytest.mark.parametrize(
    "params", [SamplingParams(do_sample=False, top_k=5, top_p=0.5), SamplingParams(temperature=0.0)]
)
def test_greedy_becomes_vllm_greedy(params: SamplingParams) -> None:
    """``do_sample=false`` or temperature 0: temperature 0 with top-k and top-p off (verl's mapping)."""
    kwargs = kwargs_for(params)
    assert (kwargs["temperature"], kwargs["top_p"], kwargs["top_k"]) == (0.0, 1.0, 0)


def test_top_k_off_is_zero_and_ignore_eos_drops_stops() -> None:
    """rlcore's ``top_k=-1`` (off) is vLLM's 0; ``ignore_eos`` sends no stop tokens; no log-probs when off."""
    kwargs = kwargs_for(SamplingParams(top_k=-1), ignore_eos=True, logprobs=False)
    assert kwargs["top_k"] == 0 and kwargs["stop_token_ids"] == [] and kwargs["ignore_eos"] is True
    assert kwargs["logprobs"] is None


def test_vllm_accepts_the_mapping(vllm: Any) -> None:
    """The keyword arguments build a real ``vllm.SamplingParams`` with the values asked for."""
    built = vllm.SamplingParams(
        **kwargs_for(SamplingParams(temperature=0.7, top_k=-1, top_p=0.9)), seed=request_seeds(3, 0, 1)[0]
    )
    assert built.temperature == 0.7 and built.top_p == 0.9 and built.top_k in (0, -1)
    assert built.max_tokens == 16 and built.logprobs == 0 and list(built.stop_token_ids) == [2, 7]
