"""A long-tailed variant of the bundled sums task, for the asynchronous-training benchmarks: the prompts and
the reward of :mod:`rlcore_plugin_tasks.arith` (the first integer of the response must be ``a + b``), but each
prompt carries a response budget ``extra_info["max_new_tokens"]`` drawn once from a Pareto distribution
(seeded: :data:`PARETO_ALPHA`, at least :data:`MIN_BUDGET`, at most :data:`MAX_BUDGET` tokens). The preset
samples every response to its budget (``rollout.ignore_eos=true``; the engines end a row at its cap,
:func:`rlcore.api.row_token_caps`), so response lengths are heavy-tailed: most are a few tokens long while a
few prompts of each batch take up to :data:`MAX_BUDGET` tokens. A synchronous step waits for its longest
response; that straggler is what partial rollout and the asynchronous modes can hide.

The tokens after the answer are the model's free continuation (its end-of-turn token included, which the
reward's decoding drops): they do not change the reward unless they continue the answer's digits.
"""

from __future__ import annotations

import math
import os
import random
from pathlib import Path
from typing import Any

from rlcore_plugin_tasks.arith import BASE_MODEL, DATA_SOURCE, _pairs
from rlcore_plugin_tasks.warm_start import build_task_data, cpu_task_preset, question_row

TASK_VERSION = "v1"
#: the budgets' tail index: P(budget > x) = (MIN_BUDGET / x) ** PARETO_ALPHA (heavier for smaller values)
PARETO_ALPHA = 1.2
#: the smallest budget (Pareto's scale) and the largest (the preset's data.max_response_length)
MIN_BUDGET = 4
MAX_BUDGET = 192
SEED = 4343
#: the extra_info key the engines read (:func:`rlcore.api.row_token_caps`)
BUDGET_KEY = "max_new_tokens"


def cache_dir() -> Path:
    """Where the task's data lives."""
    root = Path(os.environ.get("RLCORE_CACHE", Path.home() / ".cache" / "rlcore"))
    return root / f"arith-tail-{TASK_VERSION}"


def budgets(count: int, seed: int = SEED) -> list[int]:
    """``count`` response budgets from the task's seeded Pareto distribution, within ``MIN_BUDGET..MAX_BUDGET``."""
    rng = random.Random(seed)
    return [min(MAX_BUDGET, math.ceil(MIN_BUDGET * rng.paretovariate(PARETO_ALPHA))) for _ in range(count)]


def rows(split: str) -> list[dict[str, Any]]:
    """The ``train`` or ``test`` rows: the sums task's questions, each with its budget in ``extra_info``."""
    train_pairs, test_pairs = _pairs()
    pairs = train_pairs if split == "train" else test_pairs
    out = []
    for index, ((a, b), budget) in enumerate(zip(pairs, budgets(len(pairs), SEED + (split != "train")))):
        row = question_row(DATA_SOURCE, f"{a}+{b}=", str(a + b), split, index)
        row["extra_info"][BUDGET_KEY] = budget
        out.append(row)
    return out


def cpu_preset() -> dict[str, Any]:
    """The config fragment of the long-tailed task (preset ``arith-tail-cpu``)."""
    settings = {
        "data.max_prompt_length": 24,
        "data.max_response_length": MAX_BUDGET,
        "actor_rollout_ref.rollout.ignore_eos": True,
        # the update's cost follows the tokens generated, not the padded 24 + 192 columns of every row
        "actor_rollout_ref.model.use_remove_padding": True,
        "actor_rollout_ref.actor.use_dynamic_bsz": True,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 8,
        "actor_rollout_ref.actor.optim.lr": 3e-5,
        "trainer.total_training_steps": 40,
        "trainer.experiment_name": "arith-tail-grpo",
    }
    return cpu_task_preset(cache_dir(), BASE_MODEL, settings)


def prepare_assets(config: Any = None) -> Path:
    """Write the task's parquet files if they are not cached yet; returns the cache folder."""
    return build_task_data(cache_dir(), lambda: rows("train"), lambda: rows("test"))
