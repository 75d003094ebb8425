"""``rlcore run`` with ``strategy=deepspeed`` on tiny mixture-of-experts models: two GRPO steps log the
load-balancing loss and the expert load; with R2 replay the update replays the log-prob pass's routing."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from rlcore_testkit.runs import make_tiny_task, tiny_run
from rlcore_testkit.tiny import MOE_FAMILIES, make_tiny_moe_model_dir


@pytest.mark.parametrize("family", MOE_FAMILIES)
def test_two_grpo_steps_log_the_moe_metrics(tmp_path: Path, family: str) -> None:
    model_dir = make_tiny_moe_model_dir(tmp_path / "model", family=family)
    task = make_tiny_task(tmp_path / "task")
    last, _ = tiny_run(
        tmp_path,
        model_dir,
        task,
        "actor_rollout_ref.actor.strategy=deepspeed",
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.router_replay.mode=R2",
        "actor_rollout_ref.model.use_remove_padding=true",
    )
    assert last["training/global_step"] == 2
    for key in ("actor/moe_aux_loss", "actor/moe_load_max_over_mean", "actor/router_replay_agreement", "actor/pg_loss"):
        assert math.isfinite(last[key]), key
    assert last["actor/moe_aux_loss"] > 0
    assert 1.0 <= last["actor/moe_load_max_over_mean"] <= 4.0
    assert 0.0 < last["actor/router_replay_agreement"] <= 1.0
