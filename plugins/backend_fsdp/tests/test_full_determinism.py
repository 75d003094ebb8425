"""verl's ``fsdp_config.full_determinism``: deterministic torch algorithms in the worker process; the same seed
gives the same tokens and log-probs twice."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from rlcore_plugin_fsdp.fsdp import DETERMINISTIC_ENV
from rlcore_testkit.contracts.rollout import make_prompt_batch

KEY = "actor_rollout_ref__actor__fsdp_config__full_determinism"


@pytest.fixture
def restore_determinism() -> Iterator[None]:
    """Put back the process-wide switches the engine turns on."""
    saved = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
        torch.backends.cudnn.enabled,
        {name: os.environ.get(name) for name in DETERMINISTIC_ENV},
    )
    yield
    torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark, torch.backends.cudnn.enabled = saved[2:5]
    for name, value in saved[5].items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def generate_and_score(worker: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The sampled responses of the contract prompts and their log-probs under the actor."""
    out = worker.generate_sequences(make_prompt_batch(worker.tokenizer))
    return out["responses"], worker.compute_log_prob(out)["old_log_probs"]


def test_full_determinism_turns_on_deterministic_algorithms_and_repeats_the_tokens(
    make_worker: Callable[..., Any], restore_determinism: None
) -> None:
    """Without the key the process is left as it is; with it, torch runs deterministic algorithms (warn-only, as
    verl), cuDNN's autotuner is off and verl's environment is set; two workers of the same seed sample the same
    tokens and compute the same log-probs, bit for bit."""
    torch.use_deterministic_algorithms(False)
    make_worker("actor_rollout_ref")
    assert not torch.are_deterministic_algorithms_enabled()
    first = make_worker("actor_rollout_ref", **{KEY: True})
    assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
    assert not torch.backends.cudnn.benchmark and torch.backends.cudnn.deterministic
    assert all(os.environ[name] == value for name, value in DETERMINISTIC_ENV.items())
    tokens, log_probs = generate_and_score(first)
    second = make_worker("actor_rollout_ref", **{KEY: True})
    again, again_log_probs = generate_and_score(second)
    assert torch.equal(tokens, again)
    assert torch.equal(log_probs, again_log_probs)
