"""``actor_rollout_ref.model.exclude_modules`` (verl's LoRA key, peft's semantics): the modules it names
get no adapter; a regular expression must match a module's whole name, a list entry its name or suffix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_plugin_fsdp.lora import apply_lora, lora_settings

from rlcore.config.schema import ModelConfig
from rlcore.errors import RLCoreError

KEY = "actor_rollout_ref.model"


def _adapted(tiny_model_dir: Path, **keys: Any) -> set[str]:
    """Names of the modules that get a LoRA adapter on the tiny Qwen2 with these model keys."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    settings = lora_settings(ModelConfig(lora_rank=4, **keys), KEY)
    assert settings is not None
    peft_model = apply_lora(model, settings, KEY)
    return {
        name.removeprefix("base_model.model.").removesuffix(".lora_A")
        for name, _ in peft_model.named_modules()
        if name.endswith(".lora_A")
    }


def test_without_exclusions_every_linear_layer_is_adapted(tiny_model_dir: Path) -> None:
    adapted = _adapted(tiny_model_dir)
    assert len(adapted) == 2 * 7 and "model.layers.0.mlp.down_proj" in adapted


def test_a_regex_excludes_whole_names_it_matches(tiny_model_dir: Path) -> None:
    """``.*layers\\.0\\..*`` removes every adapter of layer 0 and keeps layer 1's; a pattern that matches
    only part of a name (``mlp``) excludes nothing, as re.fullmatch in verl and peft."""
    adapted = _adapted(tiny_model_dir, exclude_modules=r".*layers\.0\..*")
    assert adapted and all(name.startswith("model.layers.1.") for name in adapted)
    assert len(adapted) == 7
    with pytest.warns(UserWarning, match="no modules were excluded"):
        assert len(_adapted(tiny_model_dir, exclude_modules="mlp")) == 14


def test_a_list_excludes_names_and_suffixes(tiny_model_dir: Path) -> None:
    adapted = _adapted(tiny_model_dir, exclude_modules=["down_proj", "model.layers.1.self_attn.q_proj"])
    assert not any(name.endswith("down_proj") for name in adapted)
    assert "model.layers.1.self_attn.q_proj" not in adapted and "model.layers.0.self_attn.q_proj" in adapted
    assert len(adapted) == 14 - 2 - 1


@pytest.mark.parametrize(
    "value, message",
    [
        (3, "actor_rollout_ref.model.exclude_modules must be a regular expression or a list of module names"),
        (["q_proj", 4], "actor_rollout_ref.model.exclude_modules must be a regular expression or a list"),
        ("(unclosed", "actor_rollout_ref.model.exclude_modules='(unclosed' is not a valid regular expression"),
    ],
)
def test_bad_values_name_the_key(value: Any, message: str) -> None:
    with pytest.raises(RLCoreError, match=message.replace("(", r"\(").replace("[", r"\[")):
        lora_settings(ModelConfig(lora_rank=4, exclude_modules=value), KEY)


def test_excluding_every_target_is_an_error_naming_both_keys(tiny_model_dir: Path) -> None:
    with pytest.raises(RLCoreError, match=r"target_modules=\['q_proj'\], actor_rollout_ref.model.exclude_modules"):
        _adapted(tiny_model_dir, target_modules=["q_proj"], exclude_modules=".*")
