"""The plugin's registration: the backend, its config sections, the data-parallel size, torch-free hooks."""

from __future__ import annotations

import subprocess
import sys

import pytest
from rlcore_plugin_megatron.config import MegatronConfig
from rlcore_plugin_megatron.hooks import config_defaults, data_parallel_size
from rlcore_plugin_megatron.settings import MEGATRON_DEFAULTS

from rlcore.errors import RLCoreError
from rlcore.plugins import load_plugins


def test_backend_registered_with_data_parallel_size() -> None:
    """``megatron`` resolves to the backend and declares ``data_parallel_size`` in its spec."""
    from rlcore_plugin_megatron.backend import MegatronBackend

    registry = load_plugins().registry
    assert registry.load("training_backend", "megatron") is MegatronBackend
    assert registry.get("training_backend", "megatron").spec.data_parallel_size is data_parallel_size


def test_config_defaults_cover_actor_ref_and_critic() -> None:
    """The three ``megatron`` sections carry verl's keys and land in the loaded config."""
    from rlcore.config import load_config

    sections = config_defaults()
    for section in (sections["actor_rollout_ref"]["actor"], sections["actor_rollout_ref"]["ref"], sections["critic"]):
        assert section["megatron"] == MegatronConfig()
        assert section["megatron"].tree() == MEGATRON_DEFAULTS
    config = load_config(overrides=["actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2"])
    assert config.actor_rollout_ref.actor.megatron.tensor_model_parallel_size == 2
    assert config.critic.megatron.pipeline_model_parallel_size == 1


def test_data_parallel_size_divides_the_world() -> None:
    """world ÷ (tp × pp × cp), through the core's helper; a size that does not divide names the keys."""
    from rlcore.config import load_config
    from rlcore.config.batch_sizes import data_parallel_size as core_data_parallel_size

    config = load_config(
        overrides=[
            "actor_rollout_ref.actor.strategy=megatron",
            "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
            "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=2",
        ]
    )
    assert core_data_parallel_size(config, "actor_rollout_ref.actor", 8) == 2
    with_cp = load_config(
        overrides=[
            "actor_rollout_ref.actor.strategy=megatron",
            "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
            "actor_rollout_ref.actor.megatron.context_parallel_size=2",
        ]
    )
    assert core_data_parallel_size(with_cp, "actor_rollout_ref.actor", 8) == 2
    with pytest.raises(RLCoreError, match=r"context_parallel_size \(2\) = 4 must divide the number of ranks \(6"):
        data_parallel_size(with_cp, "actor_rollout_ref.actor", 6)
    with pytest.raises(RLCoreError, match=r"tensor_model_parallel_size \(2\) × pipeline_model_parallel_size \(2\)"):
        data_parallel_size(config, "actor_rollout_ref.actor", 6)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("context_parallel_size", 0, "context_parallel_size must be a positive integer"),
        (
            "virtual_pipeline_model_parallel_size",
            2,
            "needs actor_rollout_ref.actor.megatron.pipeline_model_parallel_size > 1",
        ),
        ("use_distributed_optimizer", True, "use_distributed_optimizer=true"),
        ("expert_tensor_parallel_size", 0, "expert_tensor_parallel_size must be a positive integer"),
        ("expert_model_parallel_size", 8, r"expert_model_parallel_size \(8\) must divide"),
        ("tensor_model_parallel_size", 0, "positive integer"),
        ("virtual_pipeline_model_parallel_size", 0, "virtual_pipeline_model_parallel_size must be a positive"),
        ("seed", "x", "seed must be an integer or null"),
    ],
)
def test_unsupported_settings_are_rejected(key: str, value: object, message: str) -> None:
    """Settings the engine cannot honour fail with the key in the message."""
    from rlcore.config import load_config

    config = load_config(overrides=[f"actor_rollout_ref.actor.megatron.{key}={value}"])
    with pytest.raises(RLCoreError, match=message) as info:
        data_parallel_size(config, "actor_rollout_ref.actor", 4)
    assert "actor_rollout_ref.actor.megatron" in str(info.value)


def test_hooks_module_does_not_import_torch() -> None:
    """Loading the plugin (``rlcore plugins``, config loading) must stay torch-free."""
    code = "import sys, rlcore_plugin_megatron.hooks; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_megatron_settings_that_change_nothing_on_the_cpu_are_noted() -> None:
    """Offloading and a bf16 ``megatron.dtype`` are noted on the CPU only, ``use_fused_kernels`` on a Megatron
    actor on any device; ``use_mbridge`` is the core's speed-only note. The plugin's ``plan_lines`` hook prints
    them as ``note:`` lines."""
    from rlcore_plugin_megatron.hooks import plan_lines
    from rlcore_plugin_megatron.plan_notes import megatron_notes

    from rlcore.config import load_config
    from rlcore.config.validate import speed_only_notes

    section = "actor_rollout_ref.actor.megatron"
    config = load_config(
        overrides=[
            "trainer.device=cpu",
            "actor_rollout_ref.actor.strategy=megatron",
            f"{section}.param_offload=true",
            f"{section}.dtype=bf16",
            f"{section}.use_mbridge=true",
            "actor_rollout_ref.model.use_fused_kernels=true",
        ]
    )
    notes = megatron_notes(config)
    assert [note.split(" changes nothing")[0] for note in notes] == [
        f"{section}.param_offload=True",
        f"{section}.dtype=bf16",
        "actor_rollout_ref.model.use_fused_kernels=True",
    ]
    assert plan_lines(config) == [f"note: {note}" for note in notes]
    assert any(note.startswith(f"{section}.use_mbridge=True changes nothing") for note in speed_only_notes(config))
    config.trainer.device = "cuda"
    assert megatron_notes(config) == [notes[-1]]
    assert plan_lines(load_config()) is None


def test_megatron_lora_rank_on_another_backend_is_a_config_error() -> None:
    """``model.lora.rank`` with the FSDP actor: the hook raises one ConfigError naming both keys."""
    from rlcore_plugin_megatron.hooks import plan_lines

    from rlcore.config import ConfigError, load_config

    config = load_config(overrides=["actor_rollout_ref.model.lora.rank=8"])
    with pytest.raises(ConfigError, match=r"^actor_rollout_ref.model.lora.rank=8 configures LoRA on the megatron "):
        plan_lines(config)
