"""The seed's verl GSM8K GRPO command line, run for one step with ``actor_rollout_ref.actor.strategy=megatron``.

Run and checked by :mod:`rlcore.testing.seed`, as rlcore's own ``tests/test_seed_command.py`` does for the
default engine, on the real GSM8K data, with the Megatron engine selected. Two more appended keys: the HF rollout engine stands in for
the seed's vLLM (generating the step's 3072 responses is cheaper with it on a CPU; the Megatron → vLLM sync
is ``test_vllm_sync.py``), and ``model.enable_gradient_checkpointing=false``, since megatron-core's
recomputation needs CUDA (the run without it must fail naming the key).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rlcore.testing.seed import check_seed_step, rlcore_cli, seed_arguments, seed_env, tiny_step_arguments

SHARED = Path(__file__).resolve().parents[4] / "shared"
SEED = SHARED / "seed-command.txt"
GSM8K = SHARED / "data" / "gsm8k"

pytestmark = pytest.mark.skipif(not (SEED.exists() and GSM8K.exists()), reason="shared/ is not beside the checkout")


def test_seed_command_runs_a_megatron_step(tmp_path: Path, tiny_model_dir: Path) -> None:
    """The seed's batch arithmetic (1024 prompts x n=3, mini-batches of 80, micro-batches of 20) runs one
    Megatron step with the seed's metrics; on the CPU the seed's gradient checkpointing is refused first."""
    env = seed_env(tmp_path)
    seed_args = seed_arguments(SEED, GSM8K, tmp_path, env)
    engine_args = ["actor_rollout_ref.actor.strategy=megatron", "actor_rollout_ref.rollout.name=hf"]
    refused_args = [*tiny_step_arguments(tiny_model_dir, tmp_path / "refused"), *engine_args]
    refused = rlcore_cli(["run", *seed_args, *refused_args], tmp_path, env, 600)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert "actor_rollout_ref.model.enable_gradient_checkpointing=true" in refused.stderr

    runs = tmp_path / "runs"
    user_args = [
        *tiny_step_arguments(tiny_model_dir, runs),
        *engine_args,
        "actor_rollout_ref.model.enable_gradient_checkpointing=false",
    ]
    rows = check_seed_step(rlcore_cli(["run", *seed_args, *user_args], tmp_path, env, 2400), runs)
    assert rows[1]["rollout/weight_checksum_diff"] <= 1e-6  # the HF engine serves the Megatron actor's weights
