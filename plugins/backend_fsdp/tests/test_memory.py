"""Memory features: gradient checkpointing under FSDP2 (CPU), bf16 mixed precision and offload (CUDA only)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy

from rlcore.api.batch import Batch


def train_once(worker: Any, batch: Batch) -> dict[str, float]:
    """One update with position-dependent advantages; returns its metrics."""
    batch["old_log_probs"] = worker.compute_log_prob(batch)["old_log_probs"]
    batch["advantages"] = torch.linspace(-1, 1, batch["old_log_probs"].numel()).view_as(batch["old_log_probs"])
    return worker.update_actor(batch).meta["metrics"]


@pytest.mark.parametrize("role", ["actor", "critic"])
def test_gradient_checkpointing_gives_the_same_update(make_worker: Callable[..., Any], batch: Batch, role: str) -> None:
    """With activation checkpointing the decoder layers recompute their forward in backward; loss, gradient
    norm and updated parameters equal those of the run without it."""
    results = []
    for checkpointing in (False, True):
        data = batch.select()
        if role == "actor":
            worker = make_worker("actor", actor_rollout_ref__model__enable_gradient_checkpointing=checkpointing)
            metrics = train_once(worker, data)
            results.append((metrics["actor/pg_loss"], metrics["actor/grad_norm"], worker.full_state_dict()))
            layer = worker.actor.module.model.layers[0]
        else:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

            worker = make_worker("critic", critic__model__enable_gradient_checkpointing=checkpointing)
            data["values"] = worker.compute_values(data)["values"]
            data["returns"] = torch.linspace(-1, 1, data["values"].numel()).view_as(data["values"])
            metrics = worker.update_critic(data).meta["metrics"]
            state = get_model_state_dict(worker.critic.module, options=StateDictOptions(full_state_dict=True))
            results.append((metrics["critic/vf_loss"], metrics["critic/grad_norm"], state))
            layer = worker.critic.module.backbone.layers[0]
        assert layer.gradient_checkpointing is checkpointing
    (loss, norm, state), (ckpt_loss, ckpt_norm, ckpt_state) = results
    assert ckpt_loss == pytest.approx(loss, abs=1e-6)
    assert ckpt_norm == pytest.approx(norm, rel=1e-5)
    for name, tensor in state.items():
        torch.testing.assert_close(ckpt_state[name], tensor, rtol=0, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="bf16 mixed precision and offload need CUDA")
def test_cuda_bf16_mixed_precision_with_offload(make_worker: Callable[..., Any], batch: Batch) -> None:
    """On CUDA: fp32 master weights computing in bf16 (``MixedPrecisionPolicy``), the actor under
    ``CPUOffloadPolicy`` and the reference with ``param_offload``; one update trains and syncs."""
    worker = make_worker(
        "actor_rollout_ref",
        trainer__device="cuda",
        actor_rollout_ref__actor__fsdp_config__dtype="bf16",
        actor_rollout_ref__actor__fsdp_config__offload_policy=True,
        actor_rollout_ref__ref__fsdp_config__param_offload=True,
        actor_rollout_ref__actor__optim__lr=1e-3,
    )
    state = worker.actor.module._get_fsdp_state()
    policy = state._fsdp_param_group.mp_policy
    assert isinstance(worker.actor.module, FSDPModule)
    assert isinstance(policy, MixedPrecisionPolicy) and policy.param_dtype is torch.bfloat16
    assert isinstance(state._fsdp_param_group.offload_policy, CPUOffloadPolicy)
    assert next(worker.actor.module.parameters()).dtype is torch.float32
    assert next(worker.ref.module.parameters()).device.type == "cpu", "param_offload keeps the reference on the CPU"
    before = worker.compute_log_prob(batch)["old_log_probs"]
    batch["old_log_probs"] = before
    batch["advantages"] = torch.ones_like(before)
    metrics = worker.update_actor(batch).meta["metrics"]
    assert metrics["actor/grad_norm"] > 0
    after = worker.compute_log_prob(batch)["old_log_probs"]
    mask = batch["response_mask"].bool()
    assert after[mask].sum() > before[mask].sum()
    assert worker.sync_weights()["rollout/weight_checksum_diff"] <= 1e-6
