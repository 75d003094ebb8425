"""Settings the DeepSpeed engine cannot run fail with an error naming the key, before any model exists;
``dtype: bf16`` (DeepSpeed's bf16 mode) trains on the CPU too."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch
from rlcore_testkit.contracts.backend import TrainingBackendContract, make_batch

from rlcore.errors import RLCoreError

KEY = "actor_rollout_ref.actor.deepspeed_config"


class Settings(TrainingBackendContract):
    """The contract's small config for the ``deepspeed`` backend (not a test class)."""

    component_name = "deepspeed"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({f"{KEY}.zero_stage": 4}, f"{KEY}.zero_stage must be 1, 2 or 3, got 4"),
        ({f"{KEY}.offload": "cpu"}, f"{KEY}.offload=cpu needs a CUDA device: on a cpu run"),
        ({f"{KEY}.offload": "nvme"}, f"{KEY}.offload='nvme' is not supported: NVMe offload needs DeepSpeed's async_io"),
        ({f"{KEY}.offload": "disk"}, f"{KEY}.offload must be none or cpu, got 'disk'"),
        ({f"{KEY}.dtype": "fp16"}, f"{KEY}.dtype must be bf16 or fp32 (or null), got 'fp16'"),
        ({f"{KEY}.dtype": "fp13"}, f"{KEY}.dtype='fp13' is not a dtype"),
        ({f"{KEY}.stage": 3}, f"unknown config key '{KEY}.stage'. Did you mean '{KEY}.zero_stage'?"),
        (
            {"actor_rollout_ref.model.lora_rank": 4},
            "actor_rollout_ref.model.lora_rank > 0 and actor_rollout_ref.model.lora_adapter_path (LoRA) are not supported",
        ),
        (
            {"actor_rollout_ref.model.lora_adapter_path": "/a"},
            "lora_adapter_path (LoRA) are not supported by the deepspeed",
        ),
    ],
)
def test_settings_that_cannot_run_are_named(tiny_model_dir: Path, overrides: dict, message: str) -> None:
    from rlcore.workers.actor import ActorRolloutRefWorker

    with pytest.raises(RLCoreError, match=re.escape(message)):
        ActorRolloutRefWorker(Settings.make_config(tiny_model_dir, **overrides), "actor", 0, 1)


def test_reward_models_are_left_to_other_backends(tiny_model_dir: Path) -> None:
    from rlcore_plugin_deepspeed.engine import check_config

    config = Settings.make_config(tiny_model_dir)
    with pytest.raises(RLCoreError, match="the deepspeed backend does not run reward models"):
        check_config(config, "reward_model", "reward_model", "reward_model.model")


def test_bf16_trains_on_the_cpu(tiny_model_dir: Path, tiny_tokenizer: object) -> None:
    """bf16 weights for the rollout and the log-probs, an update that raises the advantaged log-probs."""
    from rlcore.workers.actor import ActorRolloutRefWorker

    config = Settings.make_config(tiny_model_dir, **{f"{KEY}.dtype": "bf16"})
    worker = ActorRolloutRefWorker(config, "actor", 0, 1)
    try:
        worker.init_model()
        assert worker.actor.weights_dtype == torch.bfloat16
        assert {t.dtype for t in worker.actor.full_weights().values()} == {torch.bfloat16}
        batch = make_batch(tiny_tokenizer)
        batch["old_log_probs"] = worker.compute_log_prob(batch)["old_log_probs"]
        batch["advantages"] = torch.ones_like(batch["old_log_probs"])
        norm = worker.update_actor(batch).meta["metrics"]["actor/grad_norm"]
        assert math.isfinite(norm) and norm > 0
        mask = batch["response_mask"].bool()
        after = worker.compute_log_prob(batch)["old_log_probs"]
        assert after[mask].sum() > batch["old_log_probs"][mask].sum()
    finally:
        worker.shutdown()
