"""The seed's verl GSM8K GRPO command line, run for one step with ``actor_rollout_ref.actor.strategy=megatron``.

Run and checked by :mod:`rlcore_testkit.seed`, as rlcore's own ``tests/test_seed_command.py`` does for the
default engine, on the real GSM8K data, with the Megatron engine selected. One more appended key: the HF rollout
engine stands in for the seed's vLLM (generating the step's 3072 responses is cheaper with it on a CPU; the Megatron →
vLLM sync is ``test_vllm_sync.py``). The seed's ``model.enable_gradient_checkpointing=True`` recomputes every layer
in the backward pass, on the CPU too (``test_recompute.py``). The step's responses are at most 8 tokens long, as in
rlcore's own seed test: the seed's batch arithmetic and every checked metric are the same at any length. The model is
the seed test's narrow one with a 512-token vocabulary learnt from GSM8K (:data:`SEED_VOCABULARY`).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rlcore_testkit.seed import (
    check_seed_step,
    rlcore_cli,
    seed_arguments,
    seed_env,
    seed_model_dir,
    tiny_step_arguments,
)

SHARED = Path(__file__).resolve().parents[4] / "shared"
SEED = SHARED / "seed-command.txt"
GSM8K = SHARED / "data" / "gsm8k"
#: the step's longest response, in tokens
RESPONSE_LENGTH = 8
#: the seed model's vocabulary: 512 tokens learnt from GSM8K make the prompts 159 tokens long on average (the tiny
#: model's generic tokenizer: 194) with an output layer as small as the tiny model's; the 2048 of rlcore's own seed
#: test make Megatron's output layer cost what the shorter prompts save. The test measured 117 s with the tiny model,
#: 70-84 s with this one (99 s with 1024 tokens)
SEED_VOCABULARY = 512

pytestmark = pytest.mark.skipif(not (SEED.exists() and GSM8K.exists()), reason="shared/ is not beside the checkout")


def test_seed_command_runs_a_megatron_step(tmp_path: Path) -> None:
    """The seed's batch arithmetic (1024 prompts x n=3, mini-batches of 80, micro-batches of 20) runs one
    Megatron step with the seed's metrics, with the seed's gradient checkpointing."""
    env = seed_env(tmp_path)
    seed_args = seed_arguments(SEED, GSM8K, tmp_path, env)
    runs = tmp_path / "runs"
    user_args = [
        *tiny_step_arguments(
            seed_model_dir(tmp_path / "model", GSM8K, vocab_size=SEED_VOCABULARY), runs, RESPONSE_LENGTH
        ),
        "actor_rollout_ref.actor.strategy=megatron",
        "actor_rollout_ref.rollout.name=hf",
    ]
    rows = check_seed_step(rlcore_cli(["run", *seed_args, *user_args], tmp_path, env, 2400), runs, RESPONSE_LENGTH)
    assert rows[1]["rollout/weight_checksum_diff"] <= 1e-6  # the HF engine serves the Megatron actor's weights
