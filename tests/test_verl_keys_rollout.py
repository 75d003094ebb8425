"""verl's ``actor_rollout_ref.rollout.disable_log_stats``: the serving engines' statistics logging (vLLM's test
starting an engine is in plugins/rollout_vllm/tests/test_engine.py)."""

from __future__ import annotations

from rlcore_plugin_sglang.config import SGLangRolloutSection
from rlcore_plugin_sglang.engine import engine_kwargs

from rlcore.config import load_config
from rlcore.plugins import PluginManager

KEY = "actor_rollout_ref.rollout.disable_log_stats"


def test_disable_log_stats_sets_sglang_log_level(plugin_manager: PluginManager) -> None:
    """SGLang logs its throughput lines at info: true (the default) keeps its log level at error, false at info."""

    def log_level(*overrides: str) -> str:
        section = SGLangRolloutSection.from_tree(load_config(overrides=list(overrides), manager=plugin_manager))
        return engine_kwargs(section, model_path="m", dtype="bfloat16", seed=0, context_length=8)["log_level"]

    assert log_level() == "error"
    assert log_level(f"{KEY}=false") == "info"
