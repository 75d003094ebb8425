"""verl's ``fsdp_config.mixed_precision``: ``param_dtype`` is ``fsdp_config.dtype``, ``reduce_dtype`` the FSDP2
gradient-reduction dtype, ``buffer_dtype`` the dtype the model's floating-point buffers are kept in."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from rlcore_plugin_fsdp.fsdp import mixed_precision_policy, resolve_fsdp_config

from rlcore.errors import RLCoreError

KEY = "actor_rollout_ref.actor.fsdp_config"


def floating_buffers(module: torch.nn.Module) -> set[torch.dtype]:
    """The dtypes of the floating-point buffers of ``module``."""
    return {buffer.dtype for buffer in module.buffers() if buffer.is_floating_point()}


def test_buffer_dtype_casts_the_floating_point_buffers(make_worker: Callable[..., Any], batch: Any) -> None:
    """The buffers (rotary inv_freq) load in float32; buffer_dtype=bf16 keeps them in bf16 while the parameters
    stay float32, and the log-probs move by bf16 rounding of the rotary frequencies, no more."""
    plain = make_worker("actor")
    assert floating_buffers(plain.actor.module) == {torch.float32}
    worker = make_worker("actor", actor_rollout_ref__actor__fsdp_config__mixed_precision__buffer_dtype="bf16")
    assert floating_buffers(worker.actor.module) == {torch.bfloat16}
    assert {p.dtype for p in worker.actor.module.parameters()} == {torch.float32}
    data = batch.select()
    mask = batch["response_mask"].bool()
    moved = (worker.compute_log_prob(data)["old_log_probs"] - plain.compute_log_prob(data)["old_log_probs"])[mask]
    assert 0 < moved.abs().max() < 0.1


def test_reduce_dtype_sets_the_fsdp2_gradient_reduction_dtype() -> None:
    """The policy reduces in mixed_precision.reduce_dtype; unset, in float32 under mixed precision and in
    model_dtype without it (no policy at all when every dtype is model_dtype)."""
    policy = mixed_precision_policy(resolve_fsdp_config({"mixed_precision": {"reduce_dtype": "bf16"}}, KEY))
    assert policy is not None
    assert (policy.param_dtype, policy.reduce_dtype) == (torch.bfloat16, torch.bfloat16)
    default = mixed_precision_policy(resolve_fsdp_config({}, KEY))
    assert default is not None and default.reduce_dtype is torch.float32
    assert mixed_precision_policy(resolve_fsdp_config({"model_dtype": "bf16"}, KEY)) is None
    kept = mixed_precision_policy(
        resolve_fsdp_config({"dtype": "fp32", "mixed_precision": {"reduce_dtype": "fp16"}}, KEY)
    )
    assert kept is not None and (kept.param_dtype, kept.reduce_dtype) == (torch.float32, torch.float16)


def test_a_bad_mixed_precision_key_names_it() -> None:
    """A dtype that is none and a key the section lacks are errors naming the key."""
    with pytest.raises(RLCoreError, match=rf"{KEY}\.mixed_precision\.reduce_dtype='fp7' is not a dtype"):
        resolve_fsdp_config({"mixed_precision": {"reduce_dtype": "fp7"}}, KEY)
    with pytest.raises(RLCoreError, match=rf"unknown key {KEY}\.mixed_precision\.keep_fp32"):
        resolve_fsdp_config({"mixed_precision": {"keep_fp32": True}}, KEY)
