"""Multi-turn through the whole stack: config keys (verl's names, bad values named), the dry run reading verl's
tool and interaction YAML files, and a real training run whose rollouts go through the tool agent loop."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from rlcore_plugin_tasks.arith_tools import score, tool_call_text
from rlcore_testkit.contracts import PresetContract
from rlcore_testkit.contracts.chat_templates import tool_chat_pair
from rlcore_testkit.runs import make_tiny_task, tiny_overrides, tiny_run

from rlcore.cli import cli

VERL_CONFIG = Path(__file__).parent / "verl_examples/examples/sglang_multiturn/config"


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_tiny_task(tmp_path_factory.mktemp("task"))


@pytest.fixture(scope="module")
def tool_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model in the Qwen2.5 chat template that ends its turns and calls the calculator."""
    path = tmp_path_factory.mktemp("qwen-tools")
    tokenizer, model = tool_chat_pair("qwen2.5")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def dry_run(tmp_path: Path, model: Path, task: dict[str, Path], *extra: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["run", "--dry-run", *tiny_overrides(tmp_path, model, task), *extra])
    return result.exit_code, result.output


def test_verl_multi_turn_keys_and_files_pass_the_dry_run(tmp_path: Path, tiny_model_dir: Path, task) -> None:
    code, output = dry_run(
        tmp_path,
        tiny_model_dir,
        task,
        "actor_rollout_ref.rollout.multi_turn.enable=true",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=5",
        "actor_rollout_ref.rollout.multi_turn.max_user_turns=1",
        "actor_rollout_ref.rollout.multi_turn.max_parallel_calls=4",
        "actor_rollout_ref.rollout.multi_turn.max_tool_response_length=128",
        "actor_rollout_ref.rollout.multi_turn.tool_response_truncate_side=left",
        "actor_rollout_ref.rollout.multi_turn.format=hermes",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={VERL_CONFIG / 'tool_config/gsm8k_tool_config.yaml'}",
        "actor_rollout_ref.rollout.multi_turn.interaction_config_path="
        f"{VERL_CONFIG / 'interaction_config/gsm8k_interaction_config.yaml'}",
        "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
        "actor_rollout_ref.rollout.multi_turn.use_inference_chat_template=false",
    )
    assert code == 0, output
    assert "tool_config_path: " in output


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("actor_rollout_ref.rollout.multi_turn.format=pythonic", "multi_turn.format=pythonic: unknown tool_parser"),
        (
            "actor_rollout_ref.rollout.agent.default_agent_loop=react",
            "agent.default_agent_loop=react: unknown agent_loop",
        ),
        ("actor_rollout_ref.rollout.multi_turn.tool_response_truncate_side=top", "tool_response_truncate_side must be"),
        ("actor_rollout_ref.rollout.multi_turn.max_parallel_calls=0", "max_parallel_calls must be a positive integer"),
        (
            "actor_rollout_ref.rollout.multi_turn.tool_config_path=/nowhere.yaml",
            "tool_config_path=/nowhere.yaml: no such file",
        ),
        ("actor_rollout_ref.rollout.agent.num_workers=4", "multi-turn settings other than verl's core keys"),
        ("actor_rollout_ref.rollout.multi_turn.tokenization_sanity_check_mode=strict", "never re-tokenizes"),
    ],
)
def test_bad_multi_turn_settings_are_named(
    tmp_path: Path, tiny_model_dir: Path, task, override: str, message: str
) -> None:
    code, output = dry_run(tmp_path, tiny_model_dir, task, override)
    assert code == 2 and "Traceback" not in output
    assert message in output, output


def test_a_bad_tool_yaml_stops_the_dry_run_naming_the_entry(tmp_path: Path, tiny_model_dir: Path, task) -> None:
    tools = tmp_path / "tools.yaml"
    tools.write_text(
        "tools:\n  - class_name: calculator\n  - class_name: verl.tools.sandbox_fusion_tools.SandboxFusionTool\n"
    )
    code, output = dry_run(
        tmp_path, tiny_model_dir, task, f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tools}"
    )
    assert code == 2 and "tools[1]" in output and "SandboxFusionTool" in output, output


def test_training_with_tool_calls(tmp_path: Path, tool_model_dir: Path, task) -> None:
    """Two GRPO steps whose rollouts go through the tool agent loop with the calculator."""
    tools = tmp_path / "tools.yaml"
    tools.write_text("tools:\n  - class_name: calculator\n")
    last, run_dir = tiny_run(
        tmp_path,
        tool_model_dir,
        task,
        "data.max_prompt_length=128",
        "data.max_response_length=96",
        "actor_rollout_ref.rollout.calculate_log_probs=true",
        "actor_rollout_ref.rollout.multi_turn.enable=true",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tools}",
        "data.return_raw_chat=false",  # the tool schemas would make these prompts longer than 128 tokens
    )
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [row for row in rows if "actor/pg_loss" in row]
    assert len(steps) == 2
    for key in ("num_turns/mean", "tool/call_rate", "tool/malformed", "agent_loop/trajectory_s/mean"):
        assert all(key in row for row in steps), key
    assert max(row["num_turns/max"] for row in steps) >= 3, "no trajectory had a tool turn"
    assert any("val-aux/num_turns/mean" in row for row in rows)
    assert math.isfinite(last["actor/pg_loss"])


class TestArithToolsPresetContract(PresetContract):
    component_name = "arith-tools-cpu"


def test_arith_tools_score_reads_the_final_answer() -> None:
    call = tool_call_text(12, 34)
    assert score("rlcore/arith_tools", f"{call}\ntool\n408\nassistant\n408", "408") == 1.0
    assert score("rlcore/arith_tools", f"{call}", "408") == 0.0  # no final answer: the call's last number is 34
    assert score("rlcore/arith_tools", "410", "408") == 0.0


def test_arith_tools_teacher_conversations_are_shaped_like_rollouts() -> None:
    """The warm-start data is built token for token like an agent-loop trajectory, so the mask audit holds."""
    import random

    import numpy as np
    from rlcore_plugin_agents.runner import left_pad
    from rlcore_plugin_tasks.arith_tools import _conversation_ids
    from rlcore_testkit.tiny import build_tokenizer

    from rlcore.agents import ChatRenderer, audit_batch
    from rlcore.api.batch import Batch

    tokenizer = build_tokenizer()
    renderer = ChatRenderer(tokenizer)
    rng = random.Random(0)
    prompt_len = len(renderer.prompt_ids([{"role": "user", "content": "12*34="}]))
    rows = [_conversation_ids(tokenizer, renderer, 10 + i, 30 + i, rng) for i in range(40)]
    assert any(sum(mask) < len(mask) - prompt_len for _, mask in rows), "no tool conversation drawn"
    prompts, prompt_mask = left_pad([ids[:prompt_len] for ids, _ in rows], tokenizer.pad_token_id)
    width = max(len(ids) - prompt_len for ids, _ in rows)
    responses = torch.full((len(rows), width), tokenizer.pad_token_id)
    response_mask = torch.zeros((len(rows), width), dtype=torch.long)
    valid = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (ids, mask) in enumerate(rows):
        n = len(ids) - prompt_len
        responses[i, :n] = torch.tensor(ids[prompt_len:])
        response_mask[i, :n] = torch.tensor(mask[prompt_len:])
        valid[i, :n] = 1
    batch = Batch(
        {
            "prompts": prompts,
            "responses": responses,
            "response_mask": response_mask,
            "attention_mask": torch.cat([prompt_mask, valid], -1),
        },
        {"extra_info": np.array([{}] * len(rows), dtype=object)},
    )
    assert audit_batch(batch, tokenizer) >= len(rows)
