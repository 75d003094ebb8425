"""GDPO (verl 0.10's ``adv_estimator=gdpo``): hand-computed advantages, its errors, the dry-run check of its keys
and a real two-step run whose reward function returns the components as a dict (through verl 0.10's
``reward.*`` spellings and its ``gdpo`` reward manager)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from rlcore_plugin_grpo.config import GRPOAlgorithmConfig
from rlcore_plugin_grpo.gdpo import compute_gdpo_outcome_advantage
from rlcore_testkit import runs
from rlcore_testkit.runs import make_tiny_task, tiny_run

from rlcore.errors import RLCoreError
from rlcore.plugins import load_plugins

# groups a = rows 0, 1 and b = rows 2, 3; two components; responses of 2, 1, 2 and 2 tokens (R = 2)
UIDS = np.array(["a", "a", "b", "b"], dtype=object)
EXTRAS = {"acc": [1.0, 0.0, 1.0, 1.0], "fmt": [1.0, 1.0, 0.0, 1.0]}
MASK = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0]])
CONFIG = GRPOAlgorithmConfig(gdpo_reward_keys=["acc", "fmt"], gdpo_reward_weights=None, norm_adv_by_std_in_grpo=True)


def _gdpo(config: GRPOAlgorithmConfig, extras: dict | None = None) -> torch.Tensor:
    advantages, returns = compute_gdpo_outcome_advantage(
        token_level_rewards=torch.zeros_like(MASK),
        response_mask=MASK,
        index=UIDS,
        config=config,
        reward_extras=EXTRAS if extras is None else extras,
    )
    assert torch.equal(advantages, returns)
    return advantages


def test_gdpo_hand_computed() -> None:
    # per component and group, GRPO with the unbiased std of two values, s = 1/√2:
    #   acc: a = [1, 0] -> [s, -s]; b = [1, 1] -> [0, 0]     fmt: a = [1, 1] -> [0, 0]; b = [0, 1] -> [-s, s]
    # sum: [s, -s, -s, s] over 2, 1, 2, 2 tokens = four tokens of s and three of -s:
    #   mean = s/7, unbiased var = (4·(6s/7)² + 3·(8s/7)²)/6 = 4/7, std = 0.755929
    #   whitened: (s - s/7)/0.755929 = 0.801784 and (-s - s/7)/0.755929 = -1.069045
    up, down = 0.801784, -1.069045
    expected = torch.tensor([[up, up], [down, 0.0], [down, down], [up, up]])
    assert torch.allclose(_gdpo(CONFIG), expected, atol=1e-4)


def test_gdpo_weights_and_zero_weight() -> None:
    """With weights [1, 0] only ``acc`` counts: [s, -s, 0, 0] whitened over the seven tokens."""
    s = 1 / math.sqrt(2)
    values = [s, s, -s, 0.0, 0.0, 0.0, 0.0]
    mean = sum(values) / 7
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / 6)
    w = [(v - mean) / std for v in (s, -s, 0.0)]
    expected = torch.tensor([[w[0], w[0]], [w[1], 0.0], [w[2], w[2]], [w[2], w[2]]])
    advantages = _gdpo(dataclasses.replace(CONFIG, gdpo_reward_weights=[1.0, 0.0]))
    assert torch.allclose(advantages, expected, atol=1e-4)


def test_gdpo_names_what_is_missing() -> None:
    with pytest.raises(RLCoreError, match="needs algorithm.gdpo_reward_keys"):
        _gdpo(dataclasses.replace(CONFIG, gdpo_reward_keys=None))
    with pytest.raises(RLCoreError, match="names fmt, which the reward function did not return .*returned: acc"):
        _gdpo(CONFIG, {"acc": EXTRAS["acc"]})
    with pytest.raises(RLCoreError, match="has 1 weights for the 2 keys"):
        _gdpo(dataclasses.replace(CONFIG, gdpo_reward_weights=[1.0]))


def test_gdpo_is_registered_with_verls_reward_manager() -> None:
    registry = load_plugins().registry
    assert registry.get("advantage_estimator", "gdpo").dist == "rlcore-plugin-grpo"
    assert registry.get("reward_manager", "gdpo").dist == "rlcore-plugin-grpo"


def test_the_dry_run_asks_for_the_reward_keys() -> None:
    base = ("data.train_files=x.parquet", "actor_rollout_ref.model.path=m", "algorithm.adv_estimator=gdpo")
    result = runs.dry_run(*base)
    assert result.exit_code == 2
    assert "algorithm.adv_estimator=gdpo needs algorithm.gdpo_reward_keys" in result.output
    result = runs.dry_run(*base, "+algorithm.gdpo_reward_keys=[a,b]", "algorithm.gdpo_reward_weights=[1]")
    assert "algorithm.gdpo_reward_weights has 1 weights for the 2 keys" in result.output


REWARD = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    correct = float(solution_str.strip() == str(ground_truth).strip())
    short = float(len(solution_str) < 8)
    return {"score": correct + short, "correct": correct, "short": short}
"""


def test_gdpo_trains_on_reward_components(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Two real steps: the reward function returns two components, GDPO normalises each (verl 0.10's reward
    manager and function-name spellings)."""
    reward_file = tmp_path / "components.py"
    reward_file.write_text(REWARD)
    task = make_tiny_task(tmp_path / "task")
    last, _ = tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        "algorithm.adv_estimator=gdpo",
        "+algorithm.gdpo_reward_keys=[correct, short]",
        f"custom_reward_function.path={reward_file}",  # the tiny task's own line spells it the 0.9 way
        "reward.custom_reward_function.name=compute_score",
        "reward.reward_manager.name=gdpo",
    )
    assert last["training/global_step"] == 2
    assert math.isfinite(last["actor/pg_loss"])
