"""The SGLang engine's behaviour that does not need a GPU, and rlcore's contract suite where SGLang runs.

SGLang runs on CUDA only: the contract suites (in-process engine and server mode) skip cleanly without a GPU
or without SGLang installed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_plugin_sglang.config import SGLangRolloutSection
from rlcore_plugin_sglang.engine import SGLangRolloutEngine, engine_kwargs
from rlcore_testkit.contracts.rollout import RolloutEngineContract

from rlcore.errors import RLCoreError
from rlcore.plugins import PluginManager


def rollout_section(plugin_manager: PluginManager, *overrides: str) -> SGLangRolloutSection:
    """The engine's typed ``actor_rollout_ref.rollout`` section with ``overrides``."""
    from rlcore.config import load_config

    return SGLangRolloutSection.from_tree(load_config(overrides=list(overrides), manager=plugin_manager))


def test_registered_with_its_config_section(plugin_manager: PluginManager) -> None:
    """``rollout.name=sglang`` resolves, and the plugin's keys exist with their defaults."""
    assert plugin_manager.registry.has("rollout_engine", "sglang")
    section = rollout_section(plugin_manager, "actor_rollout_ref.rollout.sglang.update_weights_bucket_mb=64")
    assert section.sglang.update_weights_bucket_mb == 64 and dict(section.sglang.engine_kwargs) == {}


def test_cpu_device_is_refused_before_sglang_is_imported(
    plugin_manager: PluginManager, tiny_model_dir: Path, tiny_tokenizer: Any
) -> None:
    """On a CPU worker the engine says it needs CUDA and names the alternatives."""
    with pytest.raises(RLCoreError, match="runs on CUDA only.*use rollout.name=vllm"):
        SGLangRolloutEngine(str(tiny_model_dir), tiny_tokenizer, rollout_section(plugin_manager), device="cpu")
    with pytest.raises(RLCoreError, match="cannot wrap a module"):
        SGLangRolloutEngine(
            str(tiny_model_dir), tiny_tokenizer, rollout_section(plugin_manager), module=torch.nn.Linear(2, 2)
        )


def test_engine_arguments_carry_the_parallel_sizes(plugin_manager: PluginManager) -> None:
    """``rollout.tensor_model_parallel_size`` and ``expert_parallel_size`` reach SGLang as ``tp_size`` and
    ``ep_size`` (verl's mapping), and ``sglang.engine_kwargs`` come last."""
    section = rollout_section(
        plugin_manager,
        "actor_rollout_ref.rollout.tensor_model_parallel_size=4",
        "actor_rollout_ref.rollout.expert_parallel_size=2",
        "+actor_rollout_ref.rollout.sglang.engine_kwargs.attention_backend=fa3",
    )
    kwargs = engine_kwargs(section, model_path="m", dtype="bfloat16", seed=3, context_length=64)
    assert (kwargs["tp_size"], kwargs["ep_size"]) == (4, 2)
    assert (kwargs["random_seed"], kwargs["context_length"], kwargs["attention_backend"]) == (3, 64, "fa3")
    assert (
        engine_kwargs(rollout_section(plugin_manager), model_path="m", dtype="bfloat16", seed=0, context_length=8)[
            "ep_size"
        ]
        == 1
    )


@pytest.mark.gpu
class TestSGLangEngineContract(RolloutEngineContract):
    """rlcore's rollout-engine contract on a real SGLang engine (CUDA + SGLang only)."""

    component_name = "sglang"
    CONFIG_OVERRIDES = {**RolloutEngineContract.CONFIG_OVERRIDES, "load_format": "auto", "gpu_memory_utilization": 0.3}

    def make_engine(self, engine_cls: type, model_dir: Path, tokenizer: Any, config: Any) -> Any:
        """Skip without CUDA or SGLang; else start the engine in float32 on the GPU."""
        if not torch.cuda.is_available():
            pytest.skip("SGLang needs CUDA")
        from rlcore_plugin_sglang.engine import import_sglang

        try:
            import_sglang()
        except RLCoreError as exc:
            pytest.skip(str(exc))
        return engine_cls(str(model_dir), tokenizer, config, device="cuda", dtype=torch.float32)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="SGLang needs CUDA")
class TestSGLangServerContract(TestSGLangEngineContract):
    """The same contract with ``rollout.sglang_rollout_mode=server``: SGLang as an HTTP server process."""

    CONFIG_OVERRIDES = {**TestSGLangEngineContract.CONFIG_OVERRIDES, "sglang_rollout_mode": "server"}

    def make_engine(self, engine_cls: type, model_dir: Path, tokenizer: Any, config: Any) -> Any:
        """Skip without CUDA or SGLang; else start a server-mode engine and check its server runs."""
        engine = super().make_engine(engine_cls, model_dir, tokenizer, config)
        assert engine.mode == "server" and engine.engine.process.poll() is None
        return engine


def test_cuda_graph_settings_reach_sglang(plugin_manager: PluginManager) -> None:
    """``rollout.cudagraph_capture_sizes`` becomes SGLang's ``cuda_graph_bs`` while graphs are captured, and
    ``enforce_eager`` its ``disable_cuda_graph`` (which drops the sizes); by default SGLang chooses its own."""

    def kwargs(*overrides: str) -> dict[str, Any]:
        return engine_kwargs(
            rollout_section(plugin_manager, *overrides), model_path="m", dtype="bfloat16", seed=0, context_length=8
        )

    default = kwargs()
    assert default["disable_cuda_graph"] is False and "cuda_graph_bs" not in default
    sizes = "actor_rollout_ref.rollout.cudagraph_capture_sizes=[8,16,32]"
    assert kwargs(sizes)["cuda_graph_bs"] == [8, 16, 32]
    eager = kwargs(sizes, "actor_rollout_ref.rollout.enforce_eager=true")
    assert eager["disable_cuda_graph"] is True and "cuda_graph_bs" not in eager
