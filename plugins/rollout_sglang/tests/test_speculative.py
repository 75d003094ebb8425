"""Speculative decoding with the policy's MTP layers (``actor_rollout_ref.model.mtp.enable_rollout``) in SGLang's
engine arguments (SGLang runs on CUDA only: the arguments are checked here, not a run)."""

from __future__ import annotations

from rlcore_plugin_sglang.config import SGLangRolloutSection
from rlcore_plugin_sglang.engine import engine_kwargs

from rlcore.plugins import PluginManager

MTP = "actor_rollout_ref.model.mtp"


def kwargs(plugin_manager: PluginManager, *overrides: str) -> dict:
    """``sglang.Engine``'s keyword arguments for the config with ``overrides``."""
    from rlcore.config import load_config

    section = SGLangRolloutSection.from_tree(load_config(overrides=list(overrides), manager=plugin_manager))
    return engine_kwargs(section, model_path="m", dtype="bfloat16", seed=0, context_length=64)


def test_enable_rollout_passes_the_eagle_settings(plugin_manager: PluginManager) -> None:
    """With ``model.mtp.enable_rollout`` SGLang gets verl's EAGLE settings (``speculative_algorithm``,
    ``speculative_num_steps``, ``speculative_eagle_topk``, ``speculative_num_draft_tokens``); without it none,
    and ``sglang.engine_kwargs`` still come last."""
    plain = kwargs(plugin_manager, f"{MTP}.enable=true", f"{MTP}.enable_train=true")
    assert not any(name.startswith("speculative_") for name in plain)
    drafting = kwargs(
        plugin_manager,
        f"{MTP}.enable=true",
        f"{MTP}.enable_rollout=true",
        f"{MTP}.speculative_num_steps=2",
        "+actor_rollout_ref.rollout.sglang.engine_kwargs.speculative_eagle_topk=2",
    )
    assert {name: value for name, value in drafting.items() if name.startswith("speculative_")} == {
        "speculative_algorithm": "EAGLE",
        "speculative_num_steps": 2,
        "speculative_eagle_topk": 2,
        "speculative_num_draft_tokens": 4,
    }
