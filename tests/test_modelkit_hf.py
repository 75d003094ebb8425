"""The Hugging Face helpers the training engines share (``rlcore.modelkit.hf_models``): the model
section's ``override_config`` and the Hugging Face model behind an engine's module."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf
from peft import LoraConfig, get_peft_model
from rlcore_testkit.tiny import build_model, build_tokenizer

from rlcore.config.schema import ModelConfig
from rlcore.errors import RLCoreError
from rlcore.modelkit.hf_models import config_overrides, hf_model


def test_config_overrides_resolve_interpolations_and_default_to_none() -> None:
    """A DictConfig section read as the typed model section gives a plain dict (interpolations resolved);
    unset or null gives ``{}``."""
    section = OmegaConf.create({"layers": 2, "override_config": {"num_hidden_layers": "${layers}", "rope_theta": 5.0}})
    model = ModelConfig.from_mapping(section)
    assert config_overrides(model, "actor_rollout_ref.model") == {"num_hidden_layers": 2, "rope_theta": 5.0}
    assert config_overrides(ModelConfig(override_config=None), "critic.model") == {}  # type: ignore[arg-type]
    assert config_overrides(ModelConfig.from_mapping({}), "critic.model") == {}


@pytest.mark.parametrize("value", [[1, 2], "rope_theta=5", 3])
def test_config_overrides_that_are_not_a_mapping_name_the_key(value: object) -> None:
    """A list, a string or a number under ``override_config`` is an error naming the key and the value."""
    with pytest.raises(RLCoreError, match=r"critic\.model\.override_config must be a mapping"):
        config_overrides(ModelConfig.from_mapping(OmegaConf.create({"override_config": value})), "critic.model")


def test_hf_model_looks_through_peft_and_rejects_other_modules() -> None:
    """A causal LM is its own Hugging Face model, a peft model gives its base model, and a module that is
    not a Hugging Face model is an error naming its class."""
    model = build_model(build_tokenizer())
    assert hf_model(model) is model
    peft = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj"]))
    assert hf_model(peft) is model
    with pytest.raises(RLCoreError, match="Linear is not a Hugging Face model"):
        hf_model(torch.nn.Linear(2, 2))
