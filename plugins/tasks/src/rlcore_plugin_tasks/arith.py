"""The bundled CPU task that ``rlcore run`` trains when given no data: add two small numbers.

Prompts are ``"a+b="`` with ``a, b`` in ``0..MAX_OPERAND``; the reward is 1 when the first integer of the
response equals ``a + b``. A policy learning this from random weights needs far more than the five
minutes the default run may take, so the run starts from a *warm-started* model, trained (no download) by
supervised learning on a deliberately **biased teacher**: for every prompt the teacher answers ``a+b``
with probability :data:`TEACHER_CORRECT`, ``a+b+1`` with probability :data:`TEACHER_OFF_BY_ONE`, and
another nearby number otherwise. Greedy decoding of that model is mostly wrong (it picks the off-by-one
answer), while sampling is right about a third of the time — exactly the situation where RL helps: GRPO on
the training prompts removes the bias, and the greedy validation reward on held-out prompts climbs from
near 0.

The warm-started model ships with rlcore-plugin-tasks (``rlcore_plugin_tasks/data/arith-base``, built by
:func:`build_base_model` through ``python -m rlcore_plugin_tasks.build_base``); the parquet files are written once
under ``$RLCORE_CACHE/arith-<version>`` (default ``~/.cache/rlcore``).
"""

from __future__ import annotations

import os
import random
import re
from pathlib import Path
from typing import Any

from rlcore.api import ground_truth_as_text
from rlcore_plugin_tasks.warm_start import (
    build_task_data,
    cpu_task_preset,
    question_row,
    task_model,
    teacher_batches,
    warm_start,
)

TASK_VERSION = "v1"
DATA_SOURCE = "rlcore/arith"
MAX_OPERAND = 19
TEST_FRACTION = 0.2
TEACHER_CORRECT = 0.35
TEACHER_OFF_BY_ONE = 0.5
SFT_STEPS = 600
SFT_BATCH = 128
SFT_LR = 3e-3
SEED = 1234
#: the shipped warm-started model (package data, :func:`~rlcore_plugin_tasks.warm_start.shipped_model_dir`)
BASE_MODEL = "arith-base"
#: the model's maximum sequence length
MAX_POSITIONS = 64

_FIRST_INT = re.compile(r"-?\d+")


def score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None) -> float:
    """1.0 when the first integer in ``solution_str`` equals ``ground_truth``, else 0.0."""
    match = _FIRST_INT.search(solution_str)
    return 1.0 if match is not None and match.group() == ground_truth_as_text(ground_truth).strip() else 0.0


def cache_dir() -> Path:
    """Where the task's data and warm-started model live."""
    root = Path(os.environ.get("RLCORE_CACHE", Path.home() / ".cache" / "rlcore"))
    return root / f"arith-{TASK_VERSION}"


def _pairs() -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    pairs = [(a, b) for a in range(MAX_OPERAND + 1) for b in range(MAX_OPERAND + 1)]
    random.Random(SEED).shuffle(pairs)
    n_test = int(len(pairs) * TEST_FRACTION)
    return pairs[n_test:], pairs[:n_test]


def _row(a: int, b: int, split: str, index: int) -> dict[str, Any]:
    return question_row(DATA_SOURCE, f"{a}+{b}=", str(a + b), split, index)


def cpu_preset() -> dict[str, Any]:
    """The config fragment of the bundled task (preset ``arith-cpu``)."""
    settings = {
        "data.max_prompt_length": 24,
        "data.max_response_length": 4,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 8,
        "actor_rollout_ref.actor.optim.lr": 3e-5,
        "trainer.total_training_steps": 40,
        "trainer.experiment_name": "arith-grpo",
        "trainer.save_final_model": True,  # the trained policy in <run directory>/model (2.6 MB)
    }
    return cpu_task_preset(cache_dir(), BASE_MODEL, settings)


def _teacher_answer(a: int, b: int, rng: random.Random) -> int:
    u = rng.random()
    if u < TEACHER_CORRECT:
        return a + b
    if u < TEACHER_CORRECT + TEACHER_OFF_BY_ONE:
        return a + b + 1
    return a + b + rng.choice((-2, -1, 2, 3))


def base_tokenizer() -> Any:
    """The task's tokenizer, trained on the default corpus and every sum of the task."""
    from rlcore_testkit.tiny import build_tokenizer, default_corpus

    train_pairs, test_pairs = _pairs()
    return build_tokenizer(default_corpus() + [f"{a}+{b}={a + b}" for a, b in train_pairs + test_pairs])


def build_base_model(model_dir: Path, *, steps: int = SFT_STEPS, heartbeat: bool = True) -> None:
    """Train the task's small Qwen2 model on the biased teacher for ``steps`` steps and save it (with its
    tokenizer) to ``model_dir``; ``heartbeat`` prints its progress."""
    rng = random.Random(SEED)
    train_pairs, test_pairs = _pairs()
    pairs = train_pairs + test_pairs
    tokenizer = base_tokenizer()
    model = task_model(tokenizer, max_position_embeddings=MAX_POSITIONS, seed=SEED)
    questions = [f"{a}+{b}=" for a, b in pairs]
    sample_batch = teacher_batches(
        tokenizer, questions, lambda i, rng: str(_teacher_answer(*pairs[i], rng)), rng, SFT_BATCH
    )
    warm_start(
        model,
        tokenizer,
        sample_batch,
        model_dir,
        name=BASE_MODEL,
        steps=steps,
        lr=SFT_LR,
        warmup=50,
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
