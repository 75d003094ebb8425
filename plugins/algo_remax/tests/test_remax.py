"""Hand-computed ReMax advantages (masked middle tokens, a missing baseline), the registration, the estimator
contract and a short real run with the greedy baseline."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from rlcore_plugin_remax.advantage import compute_remax_outcome_advantage
from rlcore_testkit.contracts.algorithms import AdvantageEstimatorContract
from rlcore_testkit.runs import make_tiny_task, tiny_run

from rlcore.api.specs import AdvantageEstimatorSpec
from rlcore.errors import RLCoreError
from rlcore.plugins import load_plugins

# Row 0: score 1 on t = 2, padding at t = 3, greedy baseline 0.25.
# Row 1: a process reward 0.5 on t = 0, a masked (tool) token at t = 1, score 1 on t = 3, baseline 1.
REWARDS = torch.tensor([[0.0, 0.0, 1.0, 0.0], [0.5, 0.0, 0.0, 1.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 1.0, 1.0]])
BASELINES = torch.tensor([0.25, 1.0])
RETURNS = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.5, 0.0, 1.0, 1.0]])
ADVANTAGES = torch.tensor([[0.75, 0.75, 0.75, 0.0], [0.5, 0.0, 0.0, 0.0]])
INDEX = np.array(["a", "b"], dtype=object)


def test_remax_hand_computed() -> None:
    adv, ret = compute_remax_outcome_advantage(
        token_level_rewards=REWARDS, response_mask=MASK, index=INDEX, config={}, reward_baselines=BASELINES
    )
    assert torch.allclose(ret, RETURNS)
    assert torch.allclose(adv, ADVANTAGES)


def test_remax_masked_tokens_do_not_matter() -> None:
    noisy = REWARDS.clone()
    noisy[1, 1] = 7.0  # a reward on the masked token is not counted
    noisy[0, 3] = -2.0  # nor one on padding
    adv, ret = compute_remax_outcome_advantage(
        token_level_rewards=noisy, response_mask=MASK, index=INDEX, config={}, reward_baselines=BASELINES
    )
    assert torch.allclose(ret, RETURNS) and torch.allclose(adv, ADVANTAGES)
    assert (adv[MASK == 0] == 0).all() and (ret[MASK == 0] == 0).all()


def test_remax_needs_baselines() -> None:
    with pytest.raises(RLCoreError, match="needs_greedy_baseline"):
        compute_remax_outcome_advantage(token_level_rewards=REWARDS, response_mask=MASK, index=INDEX, config={})


def test_registration_declares_greedy_baseline() -> None:
    comp = load_plugins().registry.get("advantage_estimator", "remax")
    assert comp.dist == "rlcore-plugin-remax"
    assert comp.spec == AdvantageEstimatorSpec(needs_greedy_baseline=True)


def test_hooks_module_does_not_import_torch() -> None:
    code = "import sys, rlcore_plugin_remax.hooks; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


class TestReMaxContract(AdvantageEstimatorContract):
    """ReMax passes the contract; its baseline is the greedy response, not the group."""

    component_name = "remax"
    group_relative = False


def test_remax_trains_with_greedy_baseline(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Two real steps of the tiny task: the controller decodes greedy baselines (timed as gen_max)."""
    task = make_tiny_task(tmp_path / "task")
    last, _ = tiny_run(tmp_path, tiny_model_dir, task, "algorithm.adv_estimator=remax")
    assert last["training/global_step"] == 2
    assert last["timing_s/gen_max"] > 0
    assert math.isfinite(last["actor/pg_loss"])
