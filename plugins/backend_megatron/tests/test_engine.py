"""Engine behaviour beyond the contract: config errors, the Hugging Face export, initial weights from a
Megatron checkpoint (``use_dist_checkpointing``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_testkit.contracts.backend import TrainingBackendContract, make_batch

from rlcore.errors import RLCoreError


class Settings(TrainingBackendContract):
    """The contract's small config for the ``megatron`` backend (not collected)."""

    component_name = "megatron"


def actor(model_dir: Path, role: str = "actor", **overrides: Any) -> Any:
    """An initialised rank-0 worker of ``role`` with dotted-key ``overrides``."""
    from rlcore.workers.actor import ActorRolloutRefWorker

    worker = ActorRolloutRefWorker(Settings.make_config(model_dir, **overrides), role, 0, 1)
    worker.init_model()
    return worker


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"actor_rollout_ref.actor.megatron.use_megatron_fsdp": True}, r"use_megatron_fsdp=true: Megatron-FSDP"),
        ({"actor_rollout_ref.actor.megatron.dtype": "int8"}, r"megatron\.dtype must be float32, bfloat16 or float16"),
        ({"actor_rollout_ref.ref.megatron.pipeline_model_parallel_size": 2}, r"ref\.megatron parallel sizes"),
        ({"actor_rollout_ref.actor.ulysses_sequence_parallel_size": 2}, "ulysses_sequence_parallel_size"),
        (
            {"actor_rollout_ref.actor.megatron.use_dist_checkpointing": True},
            "needs actor_rollout_ref.actor.megatron.dist_checkpointing_path",
        ),
    ],
)
def test_config_errors_name_the_key(tiny_model_dir: Path, overrides: dict[str, Any], message: str) -> None:
    """The worker's config check fails before any process group exists, naming the key."""
    from rlcore.workers.actor import ActorRolloutRefWorker

    with pytest.raises(RLCoreError, match=message):
        ActorRolloutRefWorker(Settings.make_config(tiny_model_dir, **overrides), "actor_ref", 0, 1)


def test_verl_settings_that_change_nothing_on_the_cpu_are_accepted(tiny_model_dir: Path, tiny_tokenizer: Any) -> None:
    """Offloading, a lower ``megatron.dtype`` and verl's mbridge switches on ``trainer.device=cpu``: the engine
    trains (in float32, everything in host memory) and its log-probs equal those of the plain settings."""
    noop = {
        f"actor_rollout_ref.actor.megatron.{name}": True
        for name in ("param_offload", "grad_offload", "optimizer_offload", "use_mbridge")
    }
    noop["actor_rollout_ref.actor.megatron.dtype"] = "bfloat16"
    batch = make_batch(tiny_tokenizer)
    log_probs = []
    for overrides in ({}, noop):
        worker = actor(tiny_model_dir, **overrides)
        try:
            assert worker.actor.compute_dtype == torch.float32
            log_probs.append(worker.compute_log_prob(batch)["old_log_probs"])
        finally:
            worker.shutdown()
    torch.testing.assert_close(log_probs[1], log_probs[0], rtol=0, atol=0)


def test_hf_export_loads_with_transformers(tiny_model_dir: Path, tiny_tokenizer: Any, tmp_path: Path) -> None:
    """After an update, ``save_hf`` writes a directory ``AutoModelForCausalLM`` loads, whose log-probs equal the
    engine's."""
    from transformers import AutoModelForCausalLM

    from rlcore.algos.functional import logprobs_from_logits

    worker = actor(tiny_model_dir, **{"actor_rollout_ref.actor.optim.lr": 1e-3})
    try:
        batch = make_batch(tiny_tokenizer)
        batch["old_log_probs"] = worker.compute_log_prob(batch)["old_log_probs"]
        batch["advantages"] = torch.ones_like(batch["old_log_probs"])
        worker.update_actor(batch)
        expected = worker.compute_log_prob(batch)["old_log_probs"]
        worker.actor.save_hf(tmp_path / "hf", with_weights=True)
    finally:
        worker.shutdown()
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "hf", dtype=torch.float32)
    length = batch["responses"].shape[1]
    logits = model(
        input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], position_ids=batch["position_ids"]
    ).logits[:, -length - 1 : -1]
    mask = batch["response_mask"].bool()
    torch.testing.assert_close(
        logprobs_from_logits(logits, batch["responses"]).detach()[mask], expected[mask], atol=1e-5, rtol=0
    )


def test_initial_weights_from_a_megatron_checkpoint(tiny_model_dir: Path, tiny_tokenizer: Any, tmp_path: Path) -> None:
    """``use_dist_checkpointing`` with ``dist_checkpointing_path`` starts from the saved model, not from
    ``model.path``."""
    batch = make_batch(tiny_tokenizer)
    trained = actor(tiny_model_dir, **{"actor_rollout_ref.actor.optim.lr": 1e-3})
    try:
        batch["old_log_probs"] = trained.compute_log_prob(batch)["old_log_probs"]
        batch["advantages"] = torch.ones_like(batch["old_log_probs"])
        trained.update_actor(batch)
        expected = trained.compute_log_prob(batch)["old_log_probs"]
        trained.actor.save(tmp_path, {"model"})
    finally:
        trained.shutdown()
    restored = actor(
        tiny_model_dir,
        **{
            "actor_rollout_ref.actor.megatron.use_dist_checkpointing": True,
            "actor_rollout_ref.actor.megatron.dist_checkpointing_path": str(tmp_path),
        },
    )
    try:
        torch.testing.assert_close(restored.compute_log_prob(batch)["old_log_probs"], expected, atol=0, rtol=0)
    finally:
        restored.shutdown()


def test_initial_weights_from_a_megatron_core_distributed_checkpoint(
    moe_model_dir: Path, tiny_tokenizer: Any, tmp_path: Path
) -> None:
    """``dist_checkpointing_path`` naming a megatron-core distributed checkpoint (verl's ``torch_dist`` format, written
    by :func:`save_dist_checkpoint`) starts from its weights, read by megatron-core's own loader: the trained
    mixture-of-experts model's log-probs come back exactly, not those of ``model.path``."""
    from rlcore_plugin_megatron.dist_checkpoint import save_dist_checkpoint
    from rlcore_plugin_megatron.settings import dist_checkpoint_format

    batch = make_batch(tiny_tokenizer)
    trained = actor(moe_model_dir, **{"actor_rollout_ref.actor.optim.lr": 1e-3})
    try:
        initial = trained.compute_log_prob(batch)["old_log_probs"]
        batch["old_log_probs"] = initial
        batch["advantages"] = torch.ones_like(initial)
        trained.update_actor(batch)
        expected = trained.compute_log_prob(batch)["old_log_probs"]
        save_dist_checkpoint(trained.actor.chunks, tmp_path / "dist")
    finally:
        trained.shutdown()
    assert not torch.equal(initial, expected)
    assert dist_checkpoint_format(tmp_path / "dist") == "torch_dist"
    restored = actor(
        moe_model_dir,
        **{
            "actor_rollout_ref.actor.megatron.use_dist_checkpointing": True,
            "actor_rollout_ref.actor.megatron.dist_checkpointing_path": str(tmp_path / "dist"),
        },
    )
    try:
        torch.testing.assert_close(restored.compute_log_prob(batch)["old_log_probs"], expected, atol=0, rtol=0)
    finally:
        restored.shutdown()


def test_a_distributed_checkpoint_of_another_model_is_an_error_naming_the_key(
    moe_model_dir: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """megatron-core's loader refusing the checkpoint (the tiny dense model's, loaded into the tiny MoE) is an error
    naming the key and the folder."""
    from rlcore_plugin_megatron.dist_checkpoint import save_dist_checkpoint

    dense = actor(tiny_model_dir)
    try:
        save_dist_checkpoint(dense.actor.chunks, tmp_path / "dense")
    finally:
        dense.shutdown()
    with pytest.raises(RLCoreError, match=r"dist_checkpointing_path=.*dense: megatron-core cannot load"):
        actor(
            moe_model_dir,
            **{
                "actor_rollout_ref.actor.megatron.use_dist_checkpointing": True,
                "actor_rollout_ref.actor.megatron.dist_checkpointing_path": str(tmp_path / "dense"),
            },
        )


@pytest.mark.parametrize(
    ("contents", "message"),
    [
        ({}, "not a megatron-core distributed checkpoint (no readable metadata.json"),
        ({"metadata.json": "{not json"}, "not a megatron-core distributed checkpoint"),
        ({"metadata.json": '{"sharded_backend": "zarr"}'}, "in the 'zarr' format; rlcore's Megatron engine reads"),
    ],
)
def test_a_folder_that_is_no_checkpoint_is_an_error_naming_the_key_and_path(
    tiny_model_dir: Path, tmp_path: Path, contents: dict[str, str], message: str
) -> None:
    from rlcore.workers.actor import ActorRolloutRefWorker

    for name, text in contents.items():
        (tmp_path / name).write_text(text)
    overrides = {
        "actor_rollout_ref.actor.megatron.use_dist_checkpointing": True,
        "actor_rollout_ref.actor.megatron.dist_checkpointing_path": str(tmp_path),
    }
    with pytest.raises(RLCoreError, match=rf"actor_rollout_ref.actor.megatron.dist_checkpointing_path={tmp_path}: "):
        ActorRolloutRefWorker(Settings.make_config(tiny_model_dir, **overrides), "actor", 0, 1)
    with pytest.raises(RLCoreError, match=message.replace("(", r"\(")):
        ActorRolloutRefWorker(Settings.make_config(tiny_model_dir, **overrides), "actor", 0, 1)


def test_a_critic_starts_from_the_policys_distributed_checkpoint(
    moe_model_dir: Path, tiny_tokenizer: Any, tmp_path: Path
) -> None:
    """A critic given the policy's distributed checkpoint (verl's Moonlight PPO script) loads every weight but the
    output layer, which its value head replaces: its decoder holds the trained policy's weights."""
    from rlcore_plugin_megatron.dist_checkpoint import save_dist_checkpoint

    batch = make_batch(tiny_tokenizer)
    trained = actor(moe_model_dir, **{"actor_rollout_ref.actor.optim.lr": 1e-3})
    try:
        batch["old_log_probs"] = trained.compute_log_prob(batch)["old_log_probs"]
        batch["advantages"] = torch.ones_like(batch["old_log_probs"])
        trained.update_actor(batch)
        policy = {
            name: tensor.clone()
            for name, tensor in trained.actor.chunks[0].state_dict().items()
            if "decoder" in name and isinstance(tensor, torch.Tensor)
        }
        save_dist_checkpoint(trained.actor.chunks, tmp_path / "dist")
    finally:
        trained.shutdown()
    critic = Settings.make_critic(
        moe_model_dir,
        **{
            "critic.megatron.use_dist_checkpointing": True,
            "critic.megatron.dist_checkpointing_path": str(tmp_path / "dist"),
        },
    )
    try:
        state = critic.critic.chunks[0].state_dict()
        assert policy
        for name, tensor in policy.items():
            torch.testing.assert_close(state[name], tensor, atol=0, rtol=0)
        assert state["output_layer.weight"].shape[0] == 1  # the value head
    finally:
        critic.shutdown()
