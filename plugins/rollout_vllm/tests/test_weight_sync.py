"""Weight sync from a real FSDP2 trainer into a real vLLM engine, with the log-prob parity check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_testkit.contracts.backend import TrainingBackendContract, make_batch
from rlcore_testkit.contracts.rollout import PROMPTS, teacher_forced_log_probs


class FSDPSettings(TrainingBackendContract):
    """The backend contract's small run settings, for the ``fsdp`` backend (not collected)."""

    component_name = "fsdp"


def trainer_log_probs(worker: Any, tiny_model_dir: Path, ids: list[int]) -> torch.Tensor:
    """The trainer's current probe log-probs, from its gathered weights in a plain Hugging Face model."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    model.load_state_dict(worker.full_state_dict())
    return teacher_forced_log_probs(model, ids)


def train_once(worker: Any, batch: Any) -> None:
    """One actor update on ``batch`` with constant positive advantages."""
    batch.union(worker.compute_log_prob(batch).select(["old_log_probs"]))
    batch["advantages"] = torch.ones_like(batch["old_log_probs"])
    worker.update_actor(batch)


def test_sync_moves_the_engine_to_the_trainer_and_catches_a_broken_sync(
    vllm: Any, tiny_model_dir: Path, tiny_tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hybrid worker starts vLLM on dummy weights and syncs; after an update the engine's log-probs move
    to the trainer's, the parity metric is recorded, and a sync that does not reach vLLM raises. vLLM runs as
    users run it by default, in its own engine and worker processes (the other tests start it in-process): the
    weights cross a process boundary."""
    from vllm.v1.engine.core_client import InprocClient

    from rlcore.workers.actor import WeightSyncError

    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")

    worker = FSDPSettings.make_actor(
        tiny_model_dir,
        "actor_rollout",
        **{"actor_rollout_ref.rollout.name": "vllm", "actor_rollout_ref.rollout.enforce_eager": True},
    )
    try:
        engine = worker.rollout_engine
        assert not isinstance(engine.llm.llm_engine.engine_core, InprocClient), "vLLM ran in the test's process"
        assert worker.config.actor_rollout_ref.rollout.load_format == "dummy" and engine.weight_version == 1
        ids = tiny_tokenizer(PROMPTS[3])["input_ids"]
        before = engine.prompt_log_probs(ids)
        torch.testing.assert_close(before, trainer_log_probs(worker, tiny_model_dir, ids), atol=1e-4, rtol=0)

        train_once(worker, make_batch(tiny_tokenizer))
        metrics = worker.sync_weights()
        assert metrics["rollout/weight_version"] == 2.0
        assert 0 <= metrics["rollout/weight_sync_logprob_diff"] < 1e-4
        assert "rollout/weight_checksum_diff" not in metrics  # vLLM repacks weights: no checksum to compare
        after = engine.prompt_log_probs(ids)
        assert (after - before).abs().max() > 1e-3, "the update did not move the engine's log-probs"
        torch.testing.assert_close(after, trainer_log_probs(worker, tiny_model_dir, ids), atol=1e-4, rtol=0)

        train_once(worker, make_batch(tiny_tokenizer, seed=1))
        with monkeypatch.context() as broken:
            broken.setattr(engine, "update_weights", lambda named_tensors: None)
            with pytest.raises(WeightSyncError, match="log-probs of a probe sequence differ from the trainer's"):
                worker.sync_weights()
        assert worker.sync_weights()["rollout/weight_sync_logprob_diff"] < 1e-4
    finally:
        worker.shutdown()
