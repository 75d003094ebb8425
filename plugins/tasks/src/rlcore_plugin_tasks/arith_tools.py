"""A bundled multi-turn task: multiply two 2-digit numbers, with a calculator tool (preset ``arith-tools-cpu``).

A tiny model cannot multiply ``a*b`` itself, but it can copy the expression into a tool call and copy the
tool's answer back. The run starts from a model warm-started (no download) on a **biased teacher** that calls
the calculator only :data:`TEACHER_TOOL_RATE` of the time and otherwise guesses a nearby number, so greedy
decoding guesses and is almost always wrong. GRPO with multi-turn rollouts rewards the trajectories that
used the tool; the tool-call rate and with it the greedy validation reward rise.

The conversation is rendered the way the agent loop builds it, token for token: the prompt, the assistant's
``<tool_call>{...}</tool_call>`` and its end-of-turn token, the tool turn rendered alone through the chat
template, the final answer. The warm-started model ships with rlcore-plugin-tasks (``rlcore_plugin_tasks/data/arith-tools-base``,
built by :func:`build_base_model` through ``python -m rlcore_plugin_tasks.build_base``); the parquet files are
written once under ``$RLCORE_CACHE/arith-tools-<version>`` (default ``~/.cache/rlcore``).
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

from rlcore.api import ground_truth_as_text
from rlcore_plugin_tasks.arith import cache_dir as _arith_cache_dir
from rlcore_plugin_tasks.warm_start import build_task_data, cpu_task_preset, question_row, task_model, warm_start

TASK_VERSION = "v1"
DATA_SOURCE = "rlcore/arith_tools"
LOW, HIGH = 10, 99
N_TEST = 64
TEACHER_TOOL_RATE = 0.3
SFT_STEPS = 400
SFT_BATCH = 64
SFT_LR = 3e-3
SEED = 4321
#: the shipped warm-started model (package data, :func:`~rlcore_plugin_tasks.warm_start.shipped_model_dir`)
BASE_MODEL = "arith-tools-base"
#: the model's maximum sequence length
MAX_POSITIONS = 128

_INT = re.compile(r"-?\d+")
#: the task's tool YAML (verl's format): the calculator
TOOL_CONFIG = Path(__file__).parent / "data" / "arith_tools.yaml"


def score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None) -> float:
    """1.0 when the last integer of the response (the final answer, after any tool turn) is ``ground_truth``."""
    numbers = _INT.findall(solution_str)
    return 1.0 if numbers and numbers[-1] == ground_truth_as_text(ground_truth).strip() else 0.0


def cache_dir() -> Path:
    """Where the task's data and warm-started model live."""
    return _arith_cache_dir().parent / f"arith-tools-{TASK_VERSION}"


def tool_call_text(a: int, b: int) -> str:
    """The assistant's Hermes tool call for ``a*b``."""
    return "<tool_call>" + json.dumps({"name": "calculator", "arguments": {"expression": f"{a}*{b}"}}) + "</tool_call>"


def _pairs() -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    pairs = [(a, b) for a in range(LOW, HIGH + 1) for b in range(LOW, HIGH + 1)]
    random.Random(SEED).shuffle(pairs)
    return pairs[N_TEST:], pairs[:N_TEST]


def _row(a: int, b: int, split: str, index: int) -> dict[str, Any]:
    return question_row(DATA_SOURCE, f"{a}*{b}=", str(a * b), split, index)


def cpu_preset() -> dict[str, Any]:
    """The config fragment of the task (preset ``arith-tools-cpu``)."""
    settings = {
        "data.max_prompt_length": 24,
        "data.max_response_length": 48,
        "actor_rollout_ref.rollout.multi_turn.enable": True,
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns": 3,
        "actor_rollout_ref.rollout.multi_turn.max_parallel_calls": 8,
        "actor_rollout_ref.rollout.multi_turn.tool_config_path": str(TOOL_CONFIG),
        "actor_rollout_ref.actor.ppo_mini_batch_size": 16,
        "actor_rollout_ref.actor.optim.lr": 2e-5,
        "trainer.total_training_steps": 30,
        "trainer.experiment_name": "arith-tools-grpo",
    }
    return cpu_task_preset(cache_dir(), BASE_MODEL, settings)


def _teacher_guess(a: int, b: int, rng: random.Random) -> int:
    """A wrong but plausible product (the biased teacher's answer without the tool)."""
    return a * b + rng.choice((-1, 1)) * rng.randint(1, 30)


def _conversation_ids(tokenizer: Any, renderer: Any, a: int, b: int, rng: random.Random) -> tuple[list[int], list[int]]:
    """One teacher conversation as token ids and its loss mask (1 on assistant tokens), built like a rollout."""
    prompt = renderer.prompt_ids([{"role": "user", "content": f"{a}*{b}="}])
    eos = [tokenizer.eos_token_id]
    if rng.random() >= TEACHER_TOOL_RATE:
        answer = renderer.encode(str(_teacher_guess(a, b, rng))) + eos
        return prompt + answer, [0] * len(prompt) + [1] * len(answer)
    call = renderer.encode(tool_call_text(a, b)) + eos
    tool = renderer.continuation_ids([{"role": "tool", "content": str(a * b)}])
    answer = renderer.encode(str(a * b)) + eos
    ids = prompt + call + tool + answer
    return ids, [0] * len(prompt) + [1] * len(call) + [0] * len(tool) + [1] * len(answer)


def base_tokenizer() -> Any:
    """The task's tokenizer, trained on the default corpus and tool calls of 2,000 training products."""
    from rlcore_testkit.tiny import build_tokenizer, default_corpus

    pairs = _pairs()[0]
    return build_tokenizer(default_corpus() + [tool_call_text(a, b) + f" {a * b}" for a, b in pairs[:2000]])


def build_base_model(model_dir: Path, *, steps: int = SFT_STEPS, heartbeat: bool = True) -> None:
    """Train the task's small Qwen2 model on the biased teacher's conversations for ``steps`` steps and save
    it (with its tokenizer) to ``model_dir``; ``heartbeat`` prints its progress."""
    from rlcore.api import ChatRenderer

    rng = random.Random(SEED)
    pairs = _pairs()[0]
    tokenizer = base_tokenizer()
    renderer = ChatRenderer(tokenizer)
    model = task_model(tokenizer, max_position_embeddings=MAX_POSITIONS, seed=SEED)
    warm_start(
        model,
        tokenizer,
        lambda: [
            _conversation_ids(tokenizer, renderer, *pairs[rng.randrange(len(pairs))], rng) for _ in range(SFT_BATCH)
        ],
        model_dir,
        name=BASE_MODEL,
        steps=steps,
        lr=SFT_LR,
        warmup=40,
        seed=SEED,
        heartbeat=heartbeat,
    )


def prepare_assets(config: Any = None) -> Path:
    """Write the task's parquet files if they are not cached yet; returns the cache folder."""
    train_pairs, test_pairs = _pairs()
    return build_task_data(
        cache_dir(),
        lambda: [_row(a, b, "train", i) for i, (a, b) in enumerate(train_pairs)],
        lambda: [_row(a, b, "test", i) for i, (a, b) in enumerate(test_pairs)],
    )
