"""Multi-turn rollouts on the vLLM engine: the agent loops drive it turn by turn through ``generate`` (token ids
in, token ids out), every trajectory passes the mask audit, and vLLM's log-probs are the trainer's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from rlcore_plugin_agents.runner import AgentRunner, left_pad
from rlcore_testkit.contracts.chat_templates import tool_chat_pair

from rlcore.agents import audit_batch
from rlcore.api.batch import Batch
from rlcore.config import load_config
from rlcore.plugins import load_plugins


def test_tool_agent_on_vllm_passes_the_mask_audit(vllm: Any, tmp_path: Path) -> None:
    from rlcore_plugin_vllm.config import VLLMRolloutConfig
    from rlcore_plugin_vllm.engine import VLLMRolloutEngine

    tokenizer, model = tool_chat_pair("qwen2.5")
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    (tmp_path / "tools.yaml").write_text("tools:\n  - class_name: calculator\n")
    cfg = load_config(
        overrides=[
            "actor_rollout_ref.rollout.response_length=160",
            "actor_rollout_ref.rollout.prompt_length=128",
            "actor_rollout_ref.rollout.calculate_log_probs=true",
            "actor_rollout_ref.rollout.enforce_eager=true",
            "actor_rollout_ref.rollout.load_format=auto",
            "actor_rollout_ref.rollout.multi_turn.enable=true",
            "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=4",
            f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tmp_path / 'tools.yaml'}",
        ]
    )
    rng = np.random.default_rng(0)
    rows = []
    for _ in range(16):
        a, b = (int(x) for x in rng.integers(10, 99, 2))
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": f"{a}*{b}="}], add_generation_prompt=True, tokenize=False
        )
        rows.append(tokenizer(text, add_special_tokens=False)["input_ids"])
    ids, mask = left_pad(rows, tokenizer.pad_token_id, 128)
    batch = Batch(
        {"input_ids": ids, "attention_mask": mask, "position_ids": (mask.cumsum(-1) - 1).clamp(min=0)},
        {"extra_info": np.array([{} for _ in rows], dtype=object)},
        {"validate": False},
    )
    engine = VLLMRolloutEngine(str(tmp_path / "model"), tokenizer, VLLMRolloutConfig.from_tree(cfg), dtype="float32")
    try:
        out = AgentRunner(cfg, tokenizer, load_plugins().registry).run(batch, engine.generate)
    finally:
        engine.close()
    assert out.meta["agent_metrics"]["num_turns/max"] >= 3, out.meta["agent_metrics"]
    assert audit_batch(out, tokenizer) > len(out)
    with torch.no_grad():
        logits = model(input_ids=out["input_ids"], attention_mask=out["attention_mask"]).logits.float()
    width = out["prompts"].shape[1]
    scored = torch.log_softmax(logits[:, width - 1 : -1], -1).gather(-1, out["responses"][..., None])[..., 0]
    policy = out["response_mask"].bool()
    torch.testing.assert_close(scored[policy], out["rollout_log_probs"][policy], atol=2e-3, rtol=0)
