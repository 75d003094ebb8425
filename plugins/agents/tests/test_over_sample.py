"""``actor_rollout_ref.rollout.over_sample_rate`` (verl's early termination of multi-turn rollouts): a training
rollout stops once ``int(size × (1 − rate))`` trajectories have finished; the others are aborted, keep their
prompt with an empty response (``response_mask`` all 0, no loss) and are counted in ``agent_loop/aborted``."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path

import numpy as np
import pytest
from rlcore_plugin_agents.runner import AgentRunner, finish_or_abort, left_pad
from rlcore_plugin_hf.engine import HFRolloutEngine
from rlcore_testkit.contracts.chat_templates import tool_chat_pair

from rlcore.api import RolloutConfig
from rlcore.api.batch import Batch
from rlcore.config import load_config
from rlcore.errors import RLCoreError
from rlcore.plugins import load_plugins

RESPONSE_LENGTH = 160


def _config(tools: Path, rate: float) -> object:
    return load_config(
        overrides=[
            f"actor_rollout_ref.rollout.response_length={RESPONSE_LENGTH}",
            "actor_rollout_ref.rollout.seed=3",
            "actor_rollout_ref.rollout.multi_turn.enable=true",
            "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=4",
            f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tools}",
            f"actor_rollout_ref.rollout.over_sample_rate={rate}",
        ]
    )


def _prompts(tokenizer: object, count: int, validate: bool) -> Batch:
    rng = np.random.default_rng(0)
    rows = []
    for _ in range(count):
        a, b = (int(x) for x in rng.integers(10, 99, 2))
        text = tokenizer.apply_chat_template(  # type: ignore[attr-defined]
            [{"role": "user", "content": f"{a}*{b}="}], add_generation_prompt=True, tokenize=False
        )
        rows.append(tokenizer(text, add_special_tokens=False)["input_ids"])  # type: ignore[operator]
    ids, mask = left_pad(rows, tokenizer.pad_token_id, 128)  # type: ignore[attr-defined]
    tensors = {"input_ids": ids, "attention_mask": mask, "position_ids": (mask.cumsum(-1) - 1).clamp(min=0)}
    return Batch(tensors, {}, {"validate": validate})


def test_the_slowest_trajectories_are_aborted_in_training_only(tmp_path: Path) -> None:
    tools = tmp_path / "tools.yaml"
    tools.write_text("tools:\n  - class_name: calculator\n")
    tokenizer, model = tool_chat_pair("qwen2.5")
    cfg = _config(tools, 0.5)
    runner = AgentRunner(cfg, tokenizer, load_plugins().registry)
    engine = HFRolloutEngine(None, tokenizer, RolloutConfig.from_tree(cfg), module=copy.deepcopy(model))

    out = runner.run(_prompts(tokenizer, 16, validate=False), engine.generate)
    aborted = np.array([info["aborted"] for info in out["extra_info"]])
    assert out.meta["agent_metrics"]["agent_loop/aborted"] == aborted.sum() > 0
    assert (~aborted).sum() >= 8  # int(16 × (1 − 0.5)) finished before the rest were aborted
    response_attention = out["attention_mask"][:, -RESPONSE_LENGTH:]
    assert int(out["response_mask"][aborted].sum()) == 0 and int(response_attention[aborted].sum()) == 0
    assert int(out["response_mask"][~aborted].sum(-1).min()) > 0

    full = runner.run(_prompts(tokenizer, 16, validate=True), engine.generate)
    assert full.meta["agent_metrics"]["agent_loop/aborted"] == 0  # validation waits for every trajectory
    assert int(full["response_mask"].sum(-1).min()) > 0


def test_finish_or_abort_cancels_the_rest_and_raises_loop_errors() -> None:
    async def sleeper(seconds: float) -> float:
        await asyncio.sleep(seconds)
        return seconds

    async def main() -> list[bool]:
        tasks = [asyncio.ensure_future(sleeper(s)) for s in (0.0, 0.01, 5.0, 5.0)]
        await finish_or_abort(tasks, 2)
        return [t.cancelled() for t in tasks]

    assert asyncio.run(main()) == [False, False, True, True]

    async def failing() -> None:
        async def boom() -> float:
            raise RLCoreError("loop failed")

        tasks = [asyncio.ensure_future(boom()), asyncio.ensure_future(sleeper(5.0))]
        await finish_or_abort(tasks, 2)

    with pytest.raises(RLCoreError, match="loop failed"):
        asyncio.run(failing())


@pytest.mark.parametrize("rate", ["1.0", "-0.1"])
def test_bad_over_sample_rate_is_named(rate: str) -> None:
    from rlcore.agents.settings import AgentSettings

    cfg = load_config(overrides=[f"actor_rollout_ref.rollout.over_sample_rate={rate}"])
    with pytest.raises(RLCoreError, match="actor_rollout_ref.rollout.over_sample_rate"):
        AgentSettings.from_rollout(RolloutConfig.from_tree(cfg))
