"""The seed's verl GSM8K GRPO command line, run for one step with ``actor_rollout_ref.actor.strategy=megatron``.

As ``tests/test_seed_command.py`` does for the default engine: the command line is used exactly as written
(only the entry point changes), on the real GSM8K data; what a user would append through the script's own
``$@`` points it at the tiny local model and the CPU, shortens the responses and the validation set, stops
after one step, and selects the Megatron engine. Two more appended keys: the HF rollout engine stands in for
the seed's vLLM (generating the step's 3072 responses is cheaper with it on a CPU; the Megatron → vLLM sync
is ``test_vllm_sync.py``), and ``model.enable_gradient_checkpointing=false``, since megatron-core's
recomputation needs CUDA (the run without it must fail naming the key).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from rlcore.tracking.sinks import read_metrics

SHARED = Path(__file__).resolve().parents[4] / "shared"
SEED = SHARED / "seed-command.txt"
GSM8K = SHARED / "data" / "gsm8k"

pytestmark = pytest.mark.skipif(not (SEED.exists() and GSM8K.exists()), reason="shared/ is not beside the checkout")


def rlcore(args: list[str], cwd: Path, env: dict[str, str], timeout: int) -> subprocess.CompletedProcess[str]:
    """``python -m rlcore *args`` in ``cwd`` with ``env``."""
    return subprocess.run(
        [sys.executable, "-m", "rlcore", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_seed_command_runs_a_megatron_step(tmp_path: Path, tiny_model_dir: Path) -> None:
    """The seed's batch arithmetic (1024 prompts x n=3, mini-batches of 80, micro-batches of 20) runs one
    Megatron step with the seed's metrics; on the CPU the seed's gradient checkpointing is refused first."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLCORE_")}
    env["HOME"] = str(tmp_path)
    prepared = rlcore(["data", "gsm8k", "--input", str(GSM8K), "--local-dir", "~/data/gsm8k"], tmp_path, env, 300)
    assert prepared.returncode == 0, prepared.stderr

    words = shlex.split(SEED.read_text().replace("\\\n", " "))
    assert words[:3] == ["python3", "-m", "verl.trainer.main_ppo"] and words[-1] == "$@"
    seed_args = [w.replace("$HOME", str(tmp_path)) for w in words[3:-1]]
    user_args = [
        f"actor_rollout_ref.model.path={tiny_model_dir}",
        "actor_rollout_ref.actor.strategy=megatron",
        "actor_rollout_ref.rollout.name=hf",
        "trainer.device=cpu",
        "trainer.total_training_steps=1",
        "data.max_response_length=16",
        "data.val_max_samples=16",
    ]
    refused = rlcore(["run", *seed_args, *user_args, f"trainer.runs_dir={tmp_path / 'refused'}"], tmp_path, env, 600)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert "actor_rollout_ref.model.enable_gradient_checkpointing=true" in refused.stderr

    cpu_args = ["actor_rollout_ref.model.enable_gradient_checkpointing=false", f"trainer.runs_dir={tmp_path / 'runs'}"]
    result = rlcore(["run", *seed_args, *user_args, *cpu_args], tmp_path, env, 2400)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "prompts per step: 1024 x n=3 -> 3072 responses" in out
    assert "micro-batch per rank: 20 -> 12 grad-accumulation steps" in out
    for key in (
        "step:1 - ",
        "actor/pg_loss:",
        "actor/kl_loss:",
        "actor/entropy:",
        "critic/score/mean:",
        "response_length/mean:",
        "timing_s/gen:",
        "timing_s/ref:",
        "perf/throughput:",
        "val-core/openai/gsm8k/reward/mean@1:",
    ):
        assert key in out, key
    (run_dir,) = (tmp_path / "runs" / "verl_grpo_example_gsm8k").glob("qwen3_1_7b_function_rm-*")
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1]
    assert rows[1]["response_length/max"] <= 16
    assert rows[1]["rollout/weight_checksum_diff"] <= 1e-6  # the HF engine serves the Megatron actor's weights
