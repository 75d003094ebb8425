"""The reward model the FSDP engine runs. The policy and value models, their loading and their log-probs and
values are rlcore's (:mod:`rlcore.modelkit.hf_models`), shared with the other engines."""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from rlcore.api import Batch, ModelConfig, config_overrides, load_pretrained


def load_reward_model(model_config: ModelConfig, key: str, dtype: torch.dtype) -> nn.Module:
    """The frozen reward model of the typed model section at ``key`` (its ``path``):
    ``AutoModelForTokenClassification`` with one label (a sequence-classification checkpoint loads into it with
    its score head), in eval mode."""
    from transformers import AutoModelForTokenClassification

    overrides = {**config_overrides(model_config, key), "num_labels": 1}
    model = load_pretrained(
        AutoModelForTokenClassification, dataclasses.replace(model_config, override_config=overrides), key, dtype
    )
    model.requires_grad_(False)
    model.eval()
    return model


def response_scores(model: nn.Module, batch: Batch) -> torch.Tensor:
    """Float32 reward-model logits ``[B, R]`` at the response tokens' own positions ``P … P+R−1``."""
    length = batch["responses"].shape[1]
    logits = model(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        position_ids=batch["position_ids"],
        use_cache=False,
    ).logits
    return logits[:, -length:, 0].float()
