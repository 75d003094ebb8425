"""Fixtures for the vLLM plugin tests. Tests that start an engine skip cleanly where vLLM cannot be imported.

The test run starts vLLM in the test's process (the repository's ``conftest.py`` sets vLLM's
``VLLM_ENABLE_V1_MULTIPROCESSING=0``): a start there costs ~14 s of CPU, a later one ~3 s. Tests still share
started engines through :class:`EnginePool`, one pool per test module: while an in-process engine lives, vLLM holds
a ``torch.distributed`` group and freezes its environment variables in the test's process, so the engines of a
module stop when it ends, before another module runs in the same xdist worker. A rollout config's
sampling settings (:data:`SAMPLING_KEYS`) never reach vLLM's start: the engine sends them with each request.
So the pool starts one vLLM engine per model, dtype and the rest of the config, and hands out for each call
a new engine object built from the config asked for (the base class's constructor: settings, seed stream,
weight version 0) around that started vLLM, after reloading the original weights when a test replaced them.
Each started engine holds its model and KV cache (``rollout.vllm.cpu_kv_cache_gib``), so the pool keeps the most
recently used :data:`POOL_SIZE` and stops the others.
"""

from __future__ import annotations

import copy
import dataclasses
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


#: the rollout keys the engine reads per request only (its sampling settings): configs that differ in these
#: alone start vLLM identically. The seed counts among them unless vLLM starts on random weights
#: (``load_format=dummy``, drawn from vLLM's seed): every sampled request carries its own seed from
#: ``rollout.seed`` (``rlcore.rollout.sampling.request_seeds``) and greedy requests draw nothing.
SAMPLING_KEYS = ("temperature", "top_k", "top_p", "do_sample", "val_kwargs", "calculate_log_probs", "ignore_eos")


def start_key(model_dir: Path, dtype: str, config: Any) -> tuple[str, str, str]:
    """What a vLLM engine is started from: the model, the dtype and the rollout config without its
    :data:`SAMPLING_KEYS` (and without ``seed`` where the weights are loaded from the model directory)."""
    values = dataclasses.asdict(config)
    ignored = set(SAMPLING_KEYS) | ({"seed"} if config.load_format != "dummy" else set())
    return str(model_dir), dtype, repr(sorted((key, value) for key, value in values.items() if key not in ignored))


class EnginePool:
    """Started engines by :func:`start_key`, handed out as new engines of the config asked for."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        #: per start key: the engines handed out around one started vLLM since it last served its original
        #: weights, the started one first
        self.engines: dict[tuple[str, str, str], list[Any]] = {}

    def get(self, model_dir: Path, config: Any, dtype: str = "float32") -> Any:
        """An engine of ``config`` for the model, as if new: around a started vLLM of the same :func:`start_key`
        (which gets its original weights back when a test replaced them), else around a newly started one."""
        from rlcore_plugin_vllm.engine import VLLMRolloutEngine

        from rlcore.rollout.token_engine import TokenListEngine

        key = start_key(model_dir, dtype, config)
        handed = self.engines.pop(key, [])
        if not handed:
            while len(self.engines) >= POOL_SIZE:  # stop the least recently used engine first
                self.engines.pop(next(iter(self.engines)))[0].close()
            engine = VLLMRolloutEngine(str(model_dir), self.tokenizer, config, dtype=dtype)
        else:
            engine = copy.copy(handed[0])  # the started vLLM and what the engine set up at its start, shared
            TokenListEngine.__init__(engine, str(model_dir), self.tokenizer, config, dtype=dtype)
            if any(previous.weight_version for previous in handed):
                from safetensors.torch import load_file

                engine.update_weights(load_file(str(Path(model_dir) / "model.safetensors")).items(), strict=False)
                engine.load_state_dict({"calls": 0, "weight_version": 0})
                handed[0].load_state_dict({"calls": 0, "weight_version": 0})
                handed = handed[:1]
        self.engines[key] = [*handed, engine]  # the most recently used last
        return engine

    def close(self) -> None:
        """Stop every started vLLM."""
        for handed in self.engines.values():
            handed[0].close()
        self.engines.clear()


@pytest.fixture(scope="module")
def engine_pool(vllm: Any, tiny_tokenizer: Any) -> Iterator[EnginePool]:
    """The test module's :class:`EnginePool` (needs vLLM)."""
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
