"""LoRA through peft: adapter-only training, the adapter-disabled reference, merged weight sync."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from rlcore.api.batch import Batch

LORA = {
    "actor_rollout_ref__model__lora_rank": 4,
    "actor_rollout_ref__model__lora_alpha": 8,
    "actor_rollout_ref__actor__optim__lr": 1e-2,
}


def base_log_probs(model_dir: Path, batch: Batch) -> torch.Tensor:
    """Response log-probs under the unwrapped pretrained model."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    prompt_len, length = batch["prompts"].shape[1], batch["responses"].shape[1]
    with torch.no_grad():
        logits = model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], position_ids=batch["position_ids"]
        ).logits[:, prompt_len - 1 : prompt_len + length - 1]
    return torch.log_softmax(logits.float(), -1).gather(-1, batch["responses"].unsqueeze(-1)).squeeze(-1)


def train_once(worker: Any, batch: Batch) -> None:
    """One update that raises the responses' log-probs."""
    batch["old_log_probs"] = worker.compute_log_prob(batch)["old_log_probs"]
    batch["advantages"] = torch.ones_like(batch["old_log_probs"])
    worker.update_actor(batch)


def expected_merged(worker: Any) -> dict[str, torch.Tensor]:
    """``W + alpha/r · B·A`` per adapted linear layer, computed here from the peft state dict."""
    state = get_model_state_dict(worker.actor.module, options=StateDictOptions(full_state_dict=True))
    scaling = 8 / 4
    merged = {}
    for name, tensor in state.items():
        if ".lora_" in name:
            continue
        if ".base_layer." in name:
            owner = name.split(".base_layer.")[0]
            if name.endswith("weight"):
                delta = state[f"{owner}.lora_B.default.weight"] @ state[f"{owner}.lora_A.default.weight"]
                tensor = tensor + scaling * delta
            name = name.replace(".base_layer.", ".")
        merged[name.removeprefix("base_model.model.")] = tensor
    return merged


def test_only_adapters_train(make_worker: Callable[..., Any]) -> None:
    """Only the LoRA matrices require gradients, and the optimizer holds exactly those."""
    worker = make_worker("actor", **LORA)
    trainable = {name for name, param in worker.actor.module.named_parameters() if param.requires_grad}
    assert trainable and all(".lora_A." in name or ".lora_B." in name for name in trainable)
    assert "base_model.model.lm_head.weight" not in trainable
    assert sum(len(group["params"]) for group in worker.actor.optimizer.param_groups) == len(trainable)


def test_reference_is_the_base_model(make_worker: Callable[..., Any], batch: Batch, tiny_model_dir: Path) -> None:
    """The reference (adapters disabled, no second model) gives the base model's log-probs; an update
    changes the policy but not the reference."""
    worker = make_worker("actor_ref", **LORA)
    assert worker.ref.module is worker.actor.module
    base = base_log_probs(tiny_model_dir, batch)
    mask = batch["response_mask"].bool()
    ref = worker.compute_ref_log_prob(batch)["ref_log_prob"]
    torch.testing.assert_close(ref[mask], base[mask], atol=1e-5, rtol=0)
    before = worker.compute_log_prob(batch)["old_log_probs"]
    torch.testing.assert_close(before[mask], base[mask], atol=1e-5, rtol=0)

    train_once(worker, batch)
    after = worker.compute_log_prob(batch)["old_log_probs"]
    assert (after * mask).sum() > (before * mask).sum() + 1e-3, "the update did not change the policy"
    ref = worker.compute_ref_log_prob(batch)["ref_log_prob"]
    torch.testing.assert_close(ref[mask], base[mask], atol=1e-5, rtol=0)
    worker.actor.remove_padding = True  # the peft model runs packed sequences too
    torch.testing.assert_close(worker.compute_log_prob(batch)["old_log_probs"][mask], after[mask], atol=1e-5, rtol=0)
    torch.testing.assert_close(worker.compute_ref_log_prob(batch)["ref_log_prob"][mask], base[mask], atol=1e-5, rtol=0)


def test_sync_sends_merged_weights(make_worker: Callable[..., Any], batch: Batch) -> None:
    """After an update the rollout engine serves ``W + scaling·B·A`` with Hugging Face names (checksum
    check passes) and samples from the trained policy; the training model keeps its separate adapters."""
    worker = make_worker("actor_rollout", **LORA)
    train_once(worker, batch)
    metrics = worker.sync_weights()
    assert metrics["rollout/weight_checksum_diff"] <= 1e-6
    engine = worker.rollout_engine.module.state_dict()
    expected = expected_merged(worker)
    assert set(expected) <= set(engine)
    for name, tensor in expected.items():
        torch.testing.assert_close(engine[name], tensor, rtol=0, atol=1e-6)
    peft_state = get_model_state_dict(worker.actor.module, options=StateDictOptions(full_state_dict=True))
    base_q = peft_state["base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight"]
    assert not torch.equal(engine["model.layers.0.self_attn.q_proj.weight"], base_q), "adapters were not merged"


@pytest.mark.parametrize("targets", ["[q_proj,v_proj]"])
def test_target_module_list(make_worker: Callable[..., Any], targets: str) -> None:
    """``target_modules`` as a list adapts only the named projections."""
    worker = make_worker("actor", actor_rollout_ref__model__target_modules=targets, **LORA)
    names = [name for name, _ in worker.actor.module.named_parameters() if ".lora_A." in name]
    adapted = {name.split(".lora_A.")[0].rsplit(".", 1)[-1] for name in names}
    assert adapted == {"q_proj", "v_proj"}


def test_an_adapter_path_without_a_rank_resumes_from_the_adapter(
    make_worker: Callable[..., Any], batch: Batch, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """``model.lora_adapter_path`` with ``lora_rank`` 0 (verl's run_qwen3_8b_from_adapter_fsdp.sh): the actor is the
    saved adapter on the base model, with the adapter's rank, and its log-probs are that adapted model's (not the
    base model's); the reference is the base model."""
    from peft import PeftModel
    from rlcore_testkit.tiny import make_tiny_lora_adapter
    from transformers import AutoModelForCausalLM

    adapter = make_tiny_lora_adapter(tiny_model_dir, tmp_path / "adapter", rank=2)
    worker = make_worker("actor_ref", actor_rollout_ref__model__lora_adapter_path=str(adapter))
    assert worker.ref.module is worker.actor.module
    assert isinstance(worker.actor.module, PeftModel)
    assert worker.actor.module.peft_config["default"].r == 2
    got = worker.compute_log_prob(batch)["old_log_probs"]
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    adapted = PeftModel.from_pretrained(base, adapter).eval()
    prompt_len, length = batch["prompts"].shape[1], batch["responses"].shape[1]
    with torch.no_grad():
        logits = adapted(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], position_ids=batch["position_ids"]
        ).logits[:, prompt_len - 1 : prompt_len + length - 1]
    expected = torch.log_softmax(logits.float(), -1).gather(-1, batch["responses"].unsqueeze(-1)).squeeze(-1)
    mask = batch["response_mask"].bool()
    torch.testing.assert_close(got[mask], expected[mask], atol=1e-5, rtol=1e-5)
    assert (got[mask] - base_log_probs(tiny_model_dir, batch)[mask]).abs().max() > 1e-3
    torch.testing.assert_close(
        worker.compute_ref_log_prob(batch)["ref_log_prob"][mask],
        base_log_probs(tiny_model_dir, batch)[mask],
        atol=1e-5,
        rtol=1e-5,
    )


def test_an_adapter_path_without_an_adapter_is_named(make_worker: Callable[..., Any], tmp_path: Path) -> None:
    """A ``lora_adapter_path`` that holds no ``adapter_config.json`` is an error naming the key and the file."""
    from rlcore.errors import RLCoreError

    with pytest.raises(RLCoreError, match=r"actor_rollout_ref.model.lora_adapter_path='.*': no peft adapter there"):
        make_worker("actor", actor_rollout_ref__model__lora_adapter_path=str(tmp_path / "missing"))
