"""A bundled two-step arithmetic task (preset ``arith-chain-cpu``): ``a+b-c`` with the intermediate sum written out.

Prompts are ``"a+b-c="`` with ``a, b`` in ``0..MAX_OPERAND`` and ``0 <= c <= a+b``; the answer format is the
chain ``"s-c=r"`` (``s = a+b``, ``r = s-c``), and the reward is 1 when the last integer of the response is
``a+b-c``. It is harder than the sum task (``arith-cpu``): the response is several tokens long, both steps
must be right, and the warm-started model is right less often.

The run starts from a model warm-started (no download) by supervised learning on a **biased teacher** that
makes each step's result one too large with probability :data:`TEACHER_OFF_BY_ONE` and gets it right with
probability :data:`TEACHER_CORRECT` (another nearby number otherwise), independently for the two steps. Greedy
decoding follows the off-by-one mode at both steps and is almost always wrong; sampling is right about a sixth
of the time; GRPO has to move both steps to the right answer. As for the sum task, the warm start sees every
problem (the held-out ones with the teacher's biased answers); RL trains on the training problems only, and
the greedy validation reward on the held-out ones measures how far the correction generalises.

The warm-started model ships with rlcore-plugin-tasks (``rlcore_plugin_tasks/data/arith-chain-base``, built by
:func:`build_base_model` through ``python -m rlcore_plugin_tasks.build_base arith-chain``: 4.3 CPU-minutes); the
parquet files are written once under ``$RLCORE_CACHE/arith-chain-<version>``.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

from rlcore.api import ground_truth_as_text
from rlcore_plugin_tasks.arith import cache_dir as _arith_cache_dir
from rlcore_plugin_tasks.warm_start import (
    build_task_data,
    cpu_task_preset,
    question_row,
    task_model,
    teacher_batches,
    warm_start,
)

TASK_VERSION = "v1"
DATA_SOURCE = "rlcore/arith_chain"
MAX_OPERAND = 15
N_TEST = 64
TEACHER_CORRECT = 0.4
TEACHER_OFF_BY_ONE = 0.45
SFT_STEPS = 700
SFT_BATCH = 128
SFT_LR = 3e-3
SEED = 2468
#: the shipped warm-started model (package data, :func:`~rlcore_plugin_tasks.warm_start.shipped_model_dir`)
BASE_MODEL = "arith-chain-base"
#: the model's maximum sequence length
MAX_POSITIONS = 64

_INT = re.compile(r"\d+")


def score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None) -> float:
    """1.0 when the last integer of ``solution_str`` (the chain's result) equals ``ground_truth``, else 0.0."""
    numbers = _INT.findall(solution_str)
    return 1.0 if numbers and numbers[-1] == ground_truth_as_text(ground_truth).strip() else 0.0


def cache_dir() -> Path:
    """Where the task's parquet files live."""
    return _arith_cache_dir().parent / f"arith-chain-{TASK_VERSION}"


def chain_text(a: int, b: int, c: int) -> str:
    """The correct response to ``a+b-c=``: ``"s-c=r"``."""
    return f"{a + b}-{c}={a + b - c}"


def _triples() -> tuple[list[tuple[int, int, int]], list[tuple[int, int, int]]]:
    """The training and the held-out test problems (``N_TEST`` of them), in a fixed shuffled order."""
    triples = [
        (a, b, c)
        for a in range(MAX_OPERAND + 1)
        for b in range(MAX_OPERAND + 1)
        for c in range(min(a + b, MAX_OPERAND) + 1)
    ]
    random.Random(SEED).shuffle(triples)
    return triples[N_TEST:], triples[:N_TEST]


def _row(a: int, b: int, c: int, split: str, index: int) -> dict[str, Any]:
    """One verl-schema row of problem ``a+b-c``."""
    return question_row(DATA_SOURCE, f"{a}+{b}-{c}=", str(a + b - c), split, index)


def cpu_preset() -> dict[str, Any]:
    """The config fragment of the task (preset ``arith-chain-cpu``)."""
    settings = {
        "data.max_prompt_length": 24,
        "data.max_response_length": 10,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 8,
        "actor_rollout_ref.actor.optim.lr": 3e-5,
        "trainer.total_training_steps": 60,
        "trainer.experiment_name": "arith-chain-grpo",
    }
    return cpu_task_preset(cache_dir(), BASE_MODEL, settings)


def _teacher_step(value: int, rng: random.Random) -> int:
    """The biased teacher's result of one step whose right result is ``value``."""
    u = rng.random()
    if u < TEACHER_CORRECT:
        return value
    if u < TEACHER_CORRECT + TEACHER_OFF_BY_ONE:
        return value + 1
    return max(0, value + rng.choice((-2, -1, 2)))


def teacher_response(a: int, b: int, c: int, rng: random.Random) -> str:
    """The biased teacher's chain for ``a+b-c``: each step independently right, one too large or off."""
    total = _teacher_step(a + b, rng)
    return f"{total}-{c}={_teacher_step(max(0, total - c), rng)}"


def base_tokenizer() -> Any:
    """The task's tokenizer, trained on the default corpus and every chain of the task."""
    from rlcore_testkit.tiny import build_tokenizer, default_corpus

    train, test = _triples()
    return build_tokenizer(default_corpus() + [f"{a}+{b}-{c}={chain_text(a, b, c)}" for a, b, c in train + test])


def build_base_model(model_dir: Path, *, steps: int = SFT_STEPS, heartbeat: bool = True) -> None:
    """Train the task's small Qwen2 model on the biased teacher (every problem, the held-out ones included)
    for ``steps`` steps and save it (with its tokenizer) to ``model_dir``; ``heartbeat`` prints its progress."""
    rng = random.Random(SEED)
    train, test = _triples()
    triples = train + test
    tokenizer = base_tokenizer()
    model = task_model(tokenizer, max_position_embeddings=MAX_POSITIONS, seed=SEED)
    questions = [f"{a}+{b}-{c}=" for a, b, c in triples]
    sample_batch = teacher_batches(
        tokenizer, questions, lambda i, rng: teacher_response(*triples[i], rng), rng, SFT_BATCH
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
    train, test = _triples()
    return build_task_data(
        cache_dir(),
        lambda: [_row(a, b, c, "train", i) for i, (a, b, c) in enumerate(train)],
        lambda: [_row(a, b, c, "test", i) for i, (a, b, c) in enumerate(test)],
    )
