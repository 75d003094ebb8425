"""The seed's verl GSM8K GRPO command line (``shared/seed-command.txt``), run for one step on a tiny model.

Shared by rlcore's own test (the default engine) and by engine plugins' tests (e.g. Megatron): the command
line is used exactly as written, only the entry point changes; what a user would append through the
script's own ``$@`` (:func:`tiny_step_arguments`, plus what a test adds) points it at a tiny local model
(:func:`seed_model_dir`) and the CPU, shortens the responses and the validation set, draws no report, and stops
after one step. The batch arithmetic is the seed's own: 1024 prompts x n=3, mini-batches of 80 prompts,
micro-batches of 20.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from rlcore.api import read_metrics

#: what the step's console output must show: the seed's batch arithmetic and its metrics
SEED_STEP_OUTPUT: tuple[str, ...] = (
    "prompts per step: 1024 x n=3 -> 3072 responses",
    "micro-batch per rank: 20 -> 12 grad-accumulation steps",
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
)


def rlcore_cli(args: list[str], cwd: Path, env: dict[str, str], timeout: int) -> subprocess.CompletedProcess[str]:
    """``python -m rlcore *args`` in ``cwd`` with ``env``, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "rlcore", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def seed_env(home: Path) -> dict[str, str]:
    """This process's environment without ``RLCORE_*`` variables, with ``HOME`` at ``home`` (where the
    seed's ``$HOME/data/gsm8k`` lives)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLCORE_")}
    env["HOME"] = str(home)
    return env


def seed_arguments(seed_file: Path, gsm8k_dir: Path, home: Path, env: dict[str, str]) -> list[str]:
    """Prepare ``$HOME/data/gsm8k`` from the local GSM8K copy with ``rlcore data gsm8k`` and return the seed's
    arguments after ``python3 -m verl.trainer.main_ppo`` (``$HOME`` replaced, the trailing ``$@`` removed)."""
    prepared = rlcore_cli(["data", "gsm8k", "--input", str(gsm8k_dir), "--local-dir", "~/data/gsm8k"], home, env, 300)
    assert prepared.returncode == 0, prepared.stderr
    assert (home / "data" / "gsm8k" / "train.parquet").is_file()
    words = shlex.split(seed_file.read_text().replace("\\\n", " "))
    assert words[:3] == ["python3", "-m", "verl.trainer.main_ppo"] and words[-1] == "$@"
    return [w.replace("$HOME", str(home)) for w in words[3:-1]]


def seed_model_dir(path: Path, gsm8k_dir: Path, rows: int = 2000, vocab_size: int = 2048) -> Path:
    """Write a tiny model to ``path`` whose tokenizer is trained on the first ``rows`` question/answer pairs of
    GSM8K's ``train.jsonl`` in ``gsm8k_dir`` (``vocab_size`` tokens). The seed's chat-templated prompts are then
    about 108 tokens long, near what an LLM's tokenizer makes of them, instead of the 194 of the tiny model's
    generic 512-token tokenizer: the step at the seed's batch (3072 responses) with the default engine and the
    HF rollout costs a fifth less CPU time (Megatron's step, whose output layer costs more, takes ``vocab_size=512``).
    The model is half the tiny model's width (hidden size 32: one attention head of 32, the smallest head vLLM's
    CPU attention takes; MLP 64): the step's cost is its 3072 sequences through the layers and the
    2048-row output layer, and no check reads what the weights compute."""
    from rlcore_testkit.tiny import build_model, build_tokenizer

    with (gsm8k_dir / "train.jsonl").open(encoding="utf-8") as lines:
        corpus = [f"{row['question']} {row['answer']}" for row in map(json.loads, list(lines)[:rows])]
    tokenizer = build_tokenizer(corpus, vocab_size=vocab_size)
    build_model(tokenizer, hidden_size=32, intermediate_size=64, num_heads=1, num_kv_heads=1).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def tiny_step_arguments(model_dir: Path, runs_dir: Path, response_length: int = 16) -> list[str]:
    """What a user appends to run one short step on the CPU with the tiny model at ``model_dir``, responses of
    at most ``response_length`` tokens, without the end-of-run report (no check reads it)."""
    return [
        f"actor_rollout_ref.model.path={model_dir}",
        "trainer.device=cpu",
        "trainer.total_training_steps=1",
        f"data.max_response_length={response_length}",
        "data.val_max_samples=16",
        "trainer.report=false",
        f"trainer.runs_dir={runs_dir}",
    ]


def check_seed_step(
    result: subprocess.CompletedProcess[str], runs_dir: Path, response_length: int = 16
) -> list[dict[str, Any]]:
    """Assert that the run exited 0, printed :data:`SEED_STEP_OUTPUT` and logged steps 0 and 1 with responses
    of at most ``response_length`` tokens (what :func:`tiny_step_arguments` was given); return the metrics rows."""
    assert result.returncode == 0, result.stderr[-3000:]
    for text in SEED_STEP_OUTPUT:
        assert text in result.stdout, text
    (run_dir,) = (runs_dir / "verl_grpo_example_gsm8k").glob("qwen3_1_7b_function_rm-*")
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1]
    assert rows[1]["response_length/max"] <= response_length
    return rows
