"""The mapping of rlcore's sampling settings onto SGLang's per-request sampling parameters."""

from __future__ import annotations

import pytest
from rlcore_plugin_sglang.sampling import sglang_sampling_params

from rlcore.rollout.sampling import SamplingParams


def mapped(params: SamplingParams, **overrides: object) -> dict[str, object]:
    """The mapping with the usual request settings."""
    settings = {"max_new_tokens": 16, "ignore_eos": False, "stop_token_ids": [2, 7], "seed": 11} | overrides
    return sglang_sampling_params(params, **settings)


def test_sampling_settings_pass_through() -> None:
    """temperature, top-p, top-k, length, stops and the seed reach SGLang; one sample per request."""
    sampling = mapped(SamplingParams(temperature=0.7, top_k=20, top_p=0.9))
    assert (sampling["temperature"], sampling["top_p"], sampling["top_k"]) == (0.7, 0.9, 20)
    assert sampling["n"] == 1 and sampling["max_new_tokens"] == 16 and sampling["sampling_seed"] == 11
    assert sampling["stop_token_ids"] == [2, 7] and sampling["ignore_eos"] is False
    assert sampling["no_stop_trim"] is True, "the EOS token must stay in the response (it is part of the mask)"


@pytest.mark.parametrize(
    "params", [SamplingParams(do_sample=False, top_k=5, top_p=0.5), SamplingParams(temperature=0.0)]
)
def test_greedy_turns_filters_off(params: SamplingParams) -> None:
    """Greedy decoding: temperature 0, top-k and top-p off; no seed is sent for it."""
    sampling = mapped(params, seed=None)
    assert (sampling["temperature"], sampling["top_p"], sampling["top_k"]) == (0.0, 1.0, -1)
    assert "sampling_seed" not in sampling


def test_top_k_off_and_ignore_eos() -> None:
    """rlcore's ``top_k <= 0`` is SGLang's -1; ``ignore_eos`` sends no stop tokens."""
    sampling = mapped(SamplingParams(top_k=0), ignore_eos=True)
    assert sampling["top_k"] == -1 and sampling["stop_token_ids"] == [] and sampling["ignore_eos"] is True
