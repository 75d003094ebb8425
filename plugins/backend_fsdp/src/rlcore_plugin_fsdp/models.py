"""The reward model the FSDP engine runs. The policy and value models, their loading and their log-probs and
values are rlcore's (:mod:`rlcore.modelkit.hf_models`), shared with the other engines."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from rlcore.api import Batch, load_pretrained


def load_reward_model(model_config: Mapping[str, Any], key: str, dtype: torch.dtype) -> nn.Module:
    """The frozen reward model at ``{key}.path``: ``AutoModelForTokenClassification`` with one label (a
    sequence-classification checkpoint loads into it with its score head), in eval mode."""
    from transformers import AutoModelForTokenClassification

    config = dict(model_config)
    config["override_config"] = {**dict(model_config.get("override_config", None) or {}), "num_labels": 1}
    model = load_pretrained(AutoModelForTokenClassification, config, key, dtype)
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
