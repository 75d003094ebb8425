"""The tiny mixture-of-experts builders of :mod:`rlcore_testkit.tiny` write models that transformers loads back
as sparse causal LMs with the requested experts and top-k."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from rlcore_testkit.tiny import MOE_FAMILIES, make_tiny_moe_model_dir


@pytest.mark.parametrize("family", MOE_FAMILIES)
def test_tiny_moe_model_round_trips(tmp_path: Path, family: str) -> None:
    """Saved and reloaded, the model routes each token to ``top_k`` of ``num_experts`` experts in every layer
    and reports a load-balancing loss."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = make_tiny_moe_model_dir(tmp_path / family, family=family, num_experts=4, top_k=2, num_layers=3)
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert model.config.model_type == family
    ids = tokenizer("john bought 3 apples", return_tensors="pt").input_ids
    output = model(ids, output_router_logits=True)
    assert len(output.router_logits) == 3
    assert output.router_logits[0].shape == (ids.shape[1], 4)
    assert torch.isfinite(output.aux_loss) and output.aux_loss > 0
    has_shared_expert = any(name.endswith("shared_expert") for name, _ in model.named_modules())
    assert has_shared_expert == (family == "qwen2_moe")


def test_unknown_moe_family_is_named(tmp_path: Path) -> None:
    """A family the builder does not know is a ValueError naming the choices."""
    with pytest.raises(ValueError, match="qwen3_moe, qwen2_moe"):
        make_tiny_moe_model_dir(tmp_path, family="mixtral")
