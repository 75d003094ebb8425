"""Fixtures for the vLLM plugin tests. Tests that start an engine skip cleanly where vLLM cannot be imported.

Starting a vLLM engine on CPU takes 15–30 s (vLLM spawns its engine process, which imports vLLM again), so
tests share started engines through :class:`EnginePool`: an engine is reused for an identical model and
config after its public state is reset (original weights, weight version 0, no generate calls yet). Each
engine holds about 2.3 GB (its worker process and KV cache), so the pool keeps the most recently used
:data:`POOL_SIZE` and stops the others.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

#: the most started engines the pool keeps at once
POOL_SIZE = 2


@pytest.fixture(scope="session")
def vllm() -> Any:
    """The ``vllm`` module; skips the test where it cannot be imported (vLLM is an optional extra:
    ``rlcore-plugin-vllm[cpu]`` or ``[gpu]``)."""
    from rlcore_plugin_vllm.engine import import_vllm

    from rlcore.errors import RLCoreError

    try:
        return import_vllm()
    except RLCoreError as exc:
        pytest.skip(str(exc))


class EnginePool:
    """Started engines by ``(model_dir, dtype, rollout config)``, handed out in their initial state."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.engines: dict[tuple[str, str, str], Any] = {}

    def get(self, model_dir: Path, config: Any, dtype: str = "float32") -> Any:
        """A started engine for the model and config, as if new: reloads the original weights when they
        were replaced and rewinds the sampling seeds."""
        from rlcore_plugin_vllm.engine import VLLMRolloutEngine

        key = (str(model_dir), dtype, repr(config))
        engine = self.engines.pop(key, None)
        if engine is None:
            while len(self.engines) >= POOL_SIZE:  # stop the least recently used engine first
                self.engines.pop(next(iter(self.engines))).close()
            engine = VLLMRolloutEngine(str(model_dir), self.tokenizer, config, dtype=dtype)
        elif engine.weight_version:
            from safetensors.torch import load_file

            engine.update_weights(load_file(str(Path(model_dir) / "model.safetensors")).items(), strict=False)
        engine.load_state_dict({"calls": 0, "weight_version": 0})
        self.engines[key] = engine  # the most recently used last
        return engine

    def close(self) -> None:
        """Stop every engine's vLLM process."""
        for engine in self.engines.values():
            engine.close()
        self.engines.clear()


@pytest.fixture(scope="session")
def engine_pool(vllm: Any, tiny_tokenizer: Any) -> Iterator[EnginePool]:
    """The session's :class:`EnginePool` (needs vLLM)."""
    pool = EnginePool(tiny_tokenizer)
    yield pool
    pool.close()


@pytest.fixture
def rollout_section(plugin_manager: Any) -> Any:
    """``rollout_section(**overrides)``: the typed ``actor_rollout_ref.rollout`` section for test engines (eager
    mode, real weights from the model directory, 8 response tokens) with ``overrides``."""
    from rlcore_plugin_vllm.config import VLLMRolloutConfig

    from rlcore.config import load_config

    def factory(**overrides: Any) -> Any:
        values = {"enforce_eager": True, "load_format": "auto", "response_length": 8, **overrides}
        dotted = [
            f"actor_rollout_ref.rollout.{key}={str(value).lower() if isinstance(value, bool) else value}"
            for key, value in values.items()
        ]
        return VLLMRolloutConfig.from_tree(load_config(overrides=dotted, manager=plugin_manager))

    return factory


@pytest.fixture
def make_engine(engine_pool: EnginePool, rollout_section: Any, tiny_model_dir: Path) -> Any:
    """``make_engine(model_dir=None, **rollout_overrides)``: a started float32 vLLM engine (from the pool)."""

    def factory(model_dir: Path | None = None, **overrides: Any) -> Any:
        return engine_pool.get(model_dir or tiny_model_dir, rollout_section(**overrides))

    return factory
