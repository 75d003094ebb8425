"""Agent loops on the real HF engine with real chat templates (Qwen2.5, Qwen3 with thinking, Llama 3.1).

Each template gets a tiny tokenizer and a model warm-started for a few dozen steps on calculator
conversations in that template, so sampling makes tool calls (many malformed): real multi-turn trajectories.
The mask audit must pass on every trajectory, the rollout log-probs must be what the model gives the
sequence, and a corrupted mask must be caught.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from rlcore_plugin_agents.runner import AgentRunner, left_pad
from rlcore_plugin_hf.engine import HFRolloutEngine
from rlcore_testkit.contracts import AgentLoopContract
from rlcore_testkit.contracts.chat_templates import CHAT_FAMILIES, tool_chat_pair

from rlcore.agents.audit import MaskAuditError, audit_batch
from rlcore.api import RolloutConfig
from rlcore.api.batch import Batch
from rlcore.config import load_config
from rlcore.plugins import load_plugins

RESPONSE_LENGTH = 160


@pytest.fixture(scope="module")
def tool_yaml(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tools") / "tools.yaml"
    path.write_text("tools:\n  - class_name: calculator\n")
    return path


def trained(name: str) -> tuple[Any, Any]:
    """The tokenizer and warm-started model of a chat family (trained once per test process)."""
    return tool_chat_pair(name)


@pytest.fixture(params=sorted(CHAT_FAMILIES))
def family(request: pytest.FixtureRequest) -> tuple[str, Any, Any]:
    return (request.param, *trained(request.param))


def config(tool_yaml: Path | None = None, **multi_turn: Any) -> Any:
    overrides = [
        f"actor_rollout_ref.rollout.response_length={RESPONSE_LENGTH}",
        "actor_rollout_ref.rollout.calculate_log_probs=true",
        "actor_rollout_ref.rollout.seed=3",
        "actor_rollout_ref.rollout.multi_turn.enable=true",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=4",
    ]
    if tool_yaml is not None:
        overrides.append(f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tool_yaml}")
    overrides += [f"actor_rollout_ref.rollout.multi_turn.{k}={v}" for k, v in multi_turn.items()]
    return load_config(overrides=overrides)


def prompts(tokenizer: Any, count: int = 16, extra: dict[str, Any] | None = None) -> Batch:
    rng = np.random.default_rng(0)
    rows, infos = [], []
    for _ in range(count):
        a, b = (int(x) for x in rng.integers(10, 99, 2))
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": f"{a}*{b}="}], add_generation_prompt=True, tokenize=False
        )
        rows.append(tokenizer(text, add_special_tokens=False)["input_ids"])
        infos.append({"interaction_kwargs": {"ground_truth": str(a * b)}, **(extra or {})})
    ids, mask = left_pad(rows, tokenizer.pad_token_id, 128)
    tensors = {"input_ids": ids, "attention_mask": mask, "position_ids": (mask.cumsum(-1) - 1).clamp(min=0)}
    return Batch(tensors, {"extra_info": np.array(infos, dtype=object)}, {"validate": False})


def engine(cfg: Any, tokenizer: Any, model: Any) -> HFRolloutEngine:
    import copy

    return HFRolloutEngine(None, tokenizer, RolloutConfig.from_tree(cfg), module=copy.deepcopy(model))


def test_mask_audit_passes_on_a_real_multi_turn_run(family: tuple[str, Any, Any], tool_yaml: Path) -> None:
    name, tokenizer, model = family
    cfg = config(tool_yaml)
    out = AgentRunner(cfg, tokenizer, load_plugins().registry).run(
        prompts(tokenizer), engine(cfg, tokenizer, model).generate
    )
    metrics = out.meta["agent_metrics"]
    assert metrics["tool/calls/mean"] > 0 and metrics["num_turns/max"] >= 3, metrics
    observed = (out["response_mask"] == 0) & (out["attention_mask"][:, -RESPONSE_LENGTH:] == 1)
    assert bool(observed.any()), "no tool tokens: the run was not multi-turn"
    assert audit_batch(out, tokenizer) > len(out)

    # token-in, token-out: the engine's log-probs are the model's on exactly this sequence
    with torch.no_grad():
        logits = model(input_ids=out["input_ids"], attention_mask=out["attention_mask"]).logits.float()
    width = out["prompts"].shape[1]
    scored = torch.log_softmax(logits[:, width - 1 : -1], -1).gather(-1, out["responses"][..., None])[..., 0]
    policy = out["response_mask"].bool()
    torch.testing.assert_close(scored[policy], out["rollout_log_probs"][policy], atol=2e-3, rtol=0)
    assert bool((out["rollout_log_probs"][~policy] == 0).all())

    # per-sample extras for reward functions
    assert {"num_turns", "tool_rewards", "turn_scores"} <= set(out["extra_info"][0])


def test_mask_audit_catches_wrong_masks(tool_yaml: Path) -> None:
    tokenizer, model = trained("qwen2.5")
    cfg = config(tool_yaml)
    out = AgentRunner(cfg, tokenizer, load_plugins().registry).run(
        prompts(tokenizer), engine(cfg, tokenizer, model).generate
    )
    width = RESPONSE_LENGTH
    valid = out["attention_mask"][:, -width:].bool()
    row = int(torch.nonzero((out["response_mask"] == 0) & valid)[0, 0])
    tool_positions = torch.nonzero((out["response_mask"][row] == 0) & valid[row])[:, 0]

    def corrupted(position: int, value: int) -> Batch:
        bad = out.select(list(out.keys()))
        mask = bad["response_mask"].clone()
        mask[row, position] = value
        bad["response_mask"] = mask
        return bad

    first_after_eos, inside_tool_turn = int(tool_positions[0]), int(tool_positions[len(tool_positions) // 2])
    for position, problem in ((first_after_eos, "runs past its end-of-turn token"), (inside_tool_turn, "")):
        with pytest.raises(MaskAuditError, match=f"row {row}: .*{problem}"):
            audit_batch(corrupted(position, 1), tokenizer)
    with pytest.raises(MaskAuditError, match=f"row {row}"):
        audit_batch(corrupted(0, 0), tokenizer)  # an assistant token left out


def test_single_turn_loop_is_the_engine_output(tool_yaml: Path) -> None:
    """A sample with agent_name=single_turn gets exactly what the engine gives for its prompt."""
    tokenizer, model = trained("qwen3")
    cfg = config(None, enable="false")
    batch = prompts(tokenizer, 8, {"agent_name": "single_turn_agent"})
    runner = AgentRunner(cfg, tokenizer, load_plugins().registry)
    assert runner.applies_to(batch) and not runner.settings.active
    out = runner.run(batch, engine(cfg, tokenizer, model).generate)
    direct = engine(cfg, tokenizer, model).generate(batch)
    for key in ("prompts", "responses", "response_mask", "attention_mask", "input_ids", "rollout_log_probs"):
        torch.testing.assert_close(out[key], direct[key], msg=key)


def test_interaction_replies_until_the_episode_ends(tmp_path: Path) -> None:
    """verl's GSM8K interaction YAML (``examples/sglang_multiturn/config/interaction_config``, as verl ships it;
    ``tests/test_multiturn.py`` reads the file itself): the user says 'try again' (reward 0) up to
    max_user_turns."""
    tokenizer, model = trained("llama3")
    interaction_yaml = tmp_path / "gsm8k_interaction_config.yaml"
    interaction_yaml.write_text(
        'interaction:\n  - name: "gsm8k"\n    class_name: "verl.interactions.gsm8k_interaction.Gsm8kInteraction"\n'
        "    config: {}\n"
    )
    cfg = config(None, interaction_config_path=str(interaction_yaml), max_user_turns=2)
    out = AgentRunner(cfg, tokenizer, load_plugins().registry).run(
        prompts(tokenizer, 8), engine(cfg, tokenizer, model).generate
    )
    metrics = out.meta["agent_metrics"]
    assert metrics["interaction/turns"] > 0
    assert audit_batch(out, tokenizer) >= len(out)
    scores = [info["turn_scores"] for info in out["extra_info"]]
    assert any(scores) and all(len(s) <= 2 and set(s) <= {0.0, 1.0} for s in scores)
    # a reply that leaves no room for another turn is dropped with the trailing observation tokens
    texts = [tokenizer.decode(out["responses"][row]) for row, s in enumerate(scores) if 0.0 in s]
    assert any("You need to reflect on your answer and try again." in text for text in texts)


def test_generation_is_not_held_back_by_slow_tools(tool_yaml: Path) -> None:
    """While some trajectories wait for a slow tool, the others' turns are generated: the batcher sends the
    turns that are ready instead of waiting for every trajectory."""
    from rlcore_plugin_agents.runner import TurnBatcher

    from rlcore.api import AgentSample

    tokenizer, model = trained("qwen2.5")
    cfg = config(None)
    hf = engine(cfg, tokenizer, model)
    batcher = TurnBatcher(hf.generate, tokenizer.pad_token_id, [tokenizer.eos_token_id], {"validate": True})
    batch = prompts(tokenizer, 4)
    rows = [ids[mask.bool()].tolist() for ids, mask in zip(batch["input_ids"], batch["attention_mask"])]
    finished: list[tuple[int, float]] = []

    async def trajectory(i: int) -> None:
        if i % 2:
            await asyncio.sleep(1.0)  # a slow tool call before this trajectory's turn
        await batcher.generate(rows[i])
        finished.append((i, asyncio.get_running_loop().time()))

    async def main() -> None:
        tasks = [asyncio.ensure_future(trajectory(i)) for i in range(4)]
        await asyncio.gather(batcher.serve(tasks), *tasks)

    assert AgentSample  # the loop's sample type is what the runner builds for these rows
    asyncio.run(main())
    order = [i for i, _ in sorted(finished, key=lambda item: item[1])]
    assert set(order[:2]) == {0, 2} and batcher.engine_calls == 2


class TestToolAgentContract(AgentLoopContract):
    component_name = "tool_agent"


class TestSingleTurnContract(AgentLoopContract):
    component_name = "single_turn"
