"""Activation recomputation on the CPU: ``model.enable_gradient_checkpointing=true`` (or verl's ``recompute_*``
fields of ``override_transformer_config``) makes megatron-core run each transformer layer's forward pass again in
the backward pass, and the update is the update without it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_testkit.contracts.backend import TrainingBackendContract, make_batch

CHECKPOINTING = "actor_rollout_ref.model.enable_gradient_checkpointing"
OVERRIDES = "actor_rollout_ref.actor.megatron.override_transformer_config"


class Settings(TrainingBackendContract):
    """The contract's small config (not collected: no ``Test`` prefix)."""

    component_name = "megatron"


def make_worker(model_dir: Path, **overrides: Any) -> Any:
    """An initialised Megatron actor worker on ``model_dir`` with dotted-key ``overrides``."""
    from rlcore.workers.actor import ActorRolloutRefWorker

    config = Settings.make_config(model_dir, **{"actor_rollout_ref.actor.optim.lr": 1e-3, **overrides})
    worker = ActorRolloutRefWorker(config, "actor", 0, 1)
    worker.init_model()
    return worker


def update_counting_calls(worker: Any, tokenizer: Any, part: str) -> tuple[list[int], torch.Tensor]:
    """One PPO update of ``worker`` on the contract's batch: how many times each transformer layer's forward
    (``part="layer"``) or its MoE experts' (``part="experts"``) ran during the update, and the log-probs of a probe
    batch afterwards."""
    layers = [layer for chunk in worker.actor.chunks for layer in chunk.decoder.layers]
    modules = layers if part == "layer" else [layer.mlp.experts for layer in layers]
    calls = [0] * len(modules)

    def counter(index: int) -> Any:
        def hook(module: Any, args: Any, output: Any) -> None:
            calls[index] += 1

        return hook

    batch = make_batch(tokenizer)
    batch.union(worker.compute_log_prob(batch).select(["old_log_probs"]))
    batch["advantages"] = torch.linspace(-1.0, 1.0, batch["old_log_probs"].numel()).view_as(batch["old_log_probs"])
    handles = [module.register_forward_hook(counter(i)) for i, module in enumerate(modules)]
    try:
        worker.update_actor(batch)
    finally:
        for handle in handles:
            handle.remove()
    return calls, worker.compute_log_prob(make_batch(tokenizer, seed=1))["old_log_probs"]


@pytest.mark.parametrize(
    ("model", "recompute", "part"),
    [
        ("dense", {CHECKPOINTING: True}, "layer"),
        ("moe", {CHECKPOINTING: True}, "layer"),
        (
            "dense",
            {
                f"{OVERRIDES}.recompute_granularity": "full",
                f"{OVERRIDES}.recompute_method": "block",
                f"{OVERRIDES}.recompute_num_layers": 2,
            },
            "layer",
        ),
        ("moe", {f"{OVERRIDES}.moe_layer_recompute": True}, "experts"),
    ],
    ids=["enable_gradient_checkpointing", "moe-enable_gradient_checkpointing", "full-block", "moe_layer_recompute"],
)
def test_recomputation_reruns_the_forward_and_changes_no_number(
    model: str,
    recompute: dict[str, Any],
    part: str,
    tiny_model_dir: Path,
    moe_model_dir: Path,
    tiny_tokenizer: Any,
) -> None:
    """With recomputation every layer's forward (with ``moe_layer_recompute``, every MoE layer's) runs twice per
    micro-batch of the update (once more in the backward pass) instead of once, and the updated model's log-probs
    equal those of the update without it."""
    model_dir = tiny_model_dir if model == "dense" else moe_model_dir
    results = []
    for overrides in ({}, recompute):
        worker = make_worker(model_dir, **overrides)
        try:
            config = worker.actor.chunks[0].config
            assert (config.recompute_granularity == "full" or config.moe_layer_recompute) == bool(overrides)
            results.append(update_counting_calls(worker, tiny_tokenizer, part))
        finally:
            worker.shutdown()
    (plain_calls, plain), (recomputed_calls, recomputed) = results
    assert min(plain_calls) > 0 and len(set(plain_calls)) == 1
    assert recomputed_calls == [2 * count for count in plain_calls]
    torch.testing.assert_close(recomputed, plain, rtol=0, atol=1e-6)


def test_explicit_recompute_fields_win_over_enable_gradient_checkpointing(tiny_model_dir: Path) -> None:
    """verl's ``recompute_*`` fields of ``override_transformer_config`` are used as given; the model switch adds
    the per-layer default only when none is set."""
    worker = make_worker(
        tiny_model_dir,
        **{CHECKPOINTING: True, f"{OVERRIDES}.recompute_granularity": "selective"},
    )
    try:
        config = worker.actor.chunks[0].config
        assert config.recompute_granularity == "selective"
        assert config.recompute_method is None
    finally:
        worker.shutdown()
