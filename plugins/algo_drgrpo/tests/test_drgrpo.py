"""The ``drgrpo`` preset: its values, what they compute (unscaled advantages, the Dr. GRPO aggregation), the
preset contract and a short real run with ``--preset drgrpo``."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from rlcore_testkit.contracts import PresetContract
from rlcore_testkit.runs import make_tiny_task, tiny_run

from rlcore.algos import agg_loss
from rlcore.config import load_config
from rlcore.plugins import get_component, load_plugins


def test_drgrpo_preset_values() -> None:
    cfg = load_config(presets=["drgrpo"])
    assert cfg.algorithm.adv_estimator == "grpo"
    assert cfg.algorithm.norm_adv_by_std_in_grpo is False
    assert cfg.actor_rollout_ref.actor.loss_agg_mode == "seq-mean-token-sum-norm"
    assert cfg.actor_rollout_ref.actor.use_kl_loss is False
    assert cfg.critic.loss_agg_mode == "seq-mean-token-sum-norm"  # interpolated from the actor's


def test_drgrpo_advantages_and_aggregation() -> None:
    """Under the preset: A = r − mean_g (no std), and the loss is verl v0.9.0's seq-mean-token-sum-norm: the mean
    over sequences of their token sums, divided by the padded length R."""
    cfg = load_config(presets=["drgrpo"])
    estimator = get_component("advantage_estimator", cfg.algorithm.adv_estimator)
    rewards = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [3.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    adv, _ = estimator(
        token_level_rewards=rewards,
        response_mask=mask,
        index=np.array(["a", "a", "b"], dtype=object),
        config=cfg.algorithm,
    )
    assert torch.allclose(adv, torch.tensor([[0.5, 0.5, 0.0], [-0.5, -0.5, -0.5], [3.0, 0.0, 0.0]]))
    loss = agg_loss(-adv, mask, cfg.actor_rollout_ref.actor.loss_agg_mode)
    assert loss.item() == pytest.approx((-(0.5 + 0.5) + 3 * 0.5 - 3.0) / 3 / 3)  # 3 sequences, padded R = 3


def test_registration() -> None:
    assert load_plugins().registry.get("preset", "drgrpo").dist == "rlcore-plugin-drgrpo"


def test_hooks_module_does_not_import_torch() -> None:
    code = "import sys, rlcore_plugin_drgrpo.hooks; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


class TestDrGRPOPresetContract(PresetContract):
    """The ``drgrpo`` preset passes the preset contract."""

    component_name = "drgrpo"


def test_drgrpo_preset_trains(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Two real steps of the tiny task with ``--preset drgrpo``."""
    task = make_tiny_task(tmp_path / "task")
    last, run_dir = tiny_run(tmp_path, tiny_model_dir, task, presets=("drgrpo",))
    assert last["training/global_step"] == 2
    assert math.isfinite(last["actor/pg_loss"])
    assert "actor/kl_loss" not in last
    assert "norm_adv_by_std_in_grpo: false" in (run_dir / "config.yaml").read_text()
