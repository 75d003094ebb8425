"""Configuration mistakes fail early with an RLCoreError that names the key."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.distributed as dist
from rlcore_plugin_fsdp.fsdp import resolve_fsdp_config

from rlcore.config.schema import ActorCheckpointConfig
from rlcore.errors import RLCoreError
from rlcore.workers.actor import ActorRolloutRefWorker
from rlcore.workers.critic import CriticWorker


@pytest.mark.parametrize(
    ("overrides", "keys"),
    [
        ({"actor_rollout_ref.model.path": None}, ["actor_rollout_ref.model.path"]),
        (
            {"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 3},
            ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "actor_rollout_ref.actor.ppo_mini_batch_size"],
        ),
        (
            {"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 0},
            ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"],
        ),
        ({"actor_rollout_ref.actor.fsdp_config.dtype": "fp8"}, ["actor_rollout_ref.actor.fsdp_config.dtype"]),
        (
            {"actor_rollout_ref.actor.use_dynamic_bsz": True, "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": 0},
            ["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"],
        ),
        ({"actor_rollout_ref.model.lora_rank": -1}, ["actor_rollout_ref.model.lora_rank"]),
        (
            {"actor_rollout_ref.model.lora_rank": 4, "actor_rollout_ref.model.lora_alpha": 0},
            ["actor_rollout_ref.model.lora_alpha"],
        ),
        (
            {"actor_rollout_ref.model.lora_rank": 4, "actor_rollout_ref.model.target_modules": "[]"},
            ["actor_rollout_ref.model.target_modules"],
        ),
    ],
)
def test_actor_config_errors(make_config: Callable[..., Any], overrides: dict, keys: list[str]) -> None:
    """Each bad setting raises at construction (or first use) naming every key involved."""
    config = make_config(**overrides)
    with pytest.raises(RLCoreError) as info:
        ActorRolloutRefWorker(config, "actor_rollout_ref")
    for key in keys:
        assert key in str(info.value)


def test_fsdp_config_section_is_checked() -> None:
    """Unknown keys and wrong types in an ``fsdp_config`` section are named."""
    with pytest.raises(RLCoreError, match=re.escape("critic.fsdp_config.fsdp_size")):
        resolve_fsdp_config({"fsdp_size": "all"}, "critic.fsdp_config")
    with pytest.raises(RLCoreError, match=re.escape("critic.fsdp_config.param_ofload")):
        resolve_fsdp_config({"param_ofload": True}, "critic.fsdp_config")
    assert resolve_fsdp_config({"dtype": "float16"}, "critic.fsdp_config")["dtype"] is torch.float16


def test_checkpoint_contents_are_checked(make_config: Callable[..., Any]) -> None:
    """``checkpoint.save_contents`` may only list model, optimizer, extra and hf_model."""
    config = make_config(**{"actor_rollout_ref.actor.checkpoint.save_contents": "[model, weights]"})
    with pytest.raises(RLCoreError, match=re.escape("actor_rollout_ref.actor.checkpoint.save_contents")):
        ActorCheckpointConfig.from_tree(config)


def test_invalid_config_leaves_no_process_group(make_config: Callable[..., Any]) -> None:
    """A constructor that rejects the config initialises nothing."""
    if dist.is_initialized():
        pytest.skip("a process group from another test is active")
    with pytest.raises(RLCoreError):
        ActorRolloutRefWorker(make_config(**{"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 3}), "actor")
    assert not dist.is_initialized()


def test_mini_batch_must_split_over_ranks(make_config: Callable[..., Any]) -> None:
    """ppo_mini_batch_size × n must divide by the number of ranks (checked before any process group)."""
    with pytest.raises(RLCoreError, match="divisible by the number of data-parallel ranks"):
        ActorRolloutRefWorker(make_config(), "actor", 0, 3)
    with pytest.raises(RLCoreError, match="critic.ppo_mini_batch_size"):
        CriticWorker(make_config(), "critic", 0, 3)


def test_unknown_role(make_config: Callable[..., Any]) -> None:
    """Roles are checked against the worker's list."""
    with pytest.raises(RLCoreError, match="no role 'critic'"):
        ActorRolloutRefWorker(make_config(), "critic")
    with pytest.raises(RLCoreError, match="no role 'actor'"):
        CriticWorker(make_config(), "actor")


def test_unloadable_model_path_names_the_key(make_config: Callable[..., Any], tmp_path: Any) -> None:
    """A path without a model fails in ``init_model`` naming ``actor_rollout_ref.model.path``."""
    worker = ActorRolloutRefWorker(make_config(**{"actor_rollout_ref.model.path": str(tmp_path)}), "actor")
    try:
        with pytest.raises(RLCoreError, match=re.escape("actor_rollout_ref.model.path")):
            worker.init_model()
    finally:
        worker.shutdown()


def test_unknown_rollout_engine_names_the_key(make_worker: Callable[..., Any]) -> None:
    """``rollout.name`` must be a registered rollout engine."""
    with pytest.raises(RLCoreError, match=re.escape("actor_rollout_ref.rollout.name")):
        make_worker("rollout", **{"actor_rollout_ref.rollout.name": "no-such-engine"})


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_device_without_cuda(make_config: Callable[..., Any]) -> None:
    """``trainer.device=cuda`` on a CPU-only machine is a config error."""
    with pytest.raises(RLCoreError, match=re.escape("trainer.device")):
        ActorRolloutRefWorker(make_config(**{"trainer.device": "cuda"}), "actor")
