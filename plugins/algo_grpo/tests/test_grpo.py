"""Hand-computed GRPO and Pass@k advantages, the plugin's registration and config defaults, the estimator
contract, and a short real run with ``grpo_passk``."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from rlcore_plugin_grpo import hooks
from rlcore_plugin_grpo.advantage import compute_grpo_outcome_advantage, compute_grpo_passk_outcome_advantage
from rlcore_testkit.contracts.algorithms import AdvantageEstimatorContract
from rlcore_testkit.runs import make_tiny_task, tiny_run

from rlcore.api.specs import AdvantageEstimatorSpec
from rlcore.errors import RLCoreError
from rlcore.plugins import load_plugins

EPS = 1e-6
# groups by uid, interleaved: a = [1, 0, 0], b = [2, 2, 2], c = [0.7] (a singleton)
UIDS = np.array(["a", "b", "a", "c", "b", "a"], dtype=object)
SCORES = [1.0, 2.0, 0.0, 0.7, 2.0, 0.0]
LENGTHS = [3, 1, 2, 4, 4, 3]


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    """Token-level rewards (score on the last valid token) and the right-padded mask, R = 4."""
    mask = (torch.arange(4).unsqueeze(0) < torch.tensor(LENGTHS).unsqueeze(1)).float()
    rewards = torch.zeros_like(mask)
    rewards[torch.arange(6), torch.tensor(LENGTHS) - 1] = torch.tensor(SCORES)
    return rewards, mask


def _run(norm: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Advantages, returns and mask of the example batch."""
    rewards, mask = _inputs()
    config = OmegaConf.create({"norm_adv_by_std_in_grpo": norm})
    adv, ret = compute_grpo_outcome_advantage(
        token_level_rewards=rewards, response_mask=mask, index=UIDS, config=config
    )
    return adv, ret, mask


def test_grpo_hand_computed() -> None:
    adv, ret, mask = _run()
    std_a = math.sqrt(((2 / 3) ** 2 + 2 * (1 / 3) ** 2) / 2)  # unbiased: n - 1 = 2
    low = (-1 / 3) / (std_a + EPS)
    per_sample = [(2 / 3) / (std_a + EPS), 0.0, low, 0.7 / (1 + EPS), 0.0, low]
    expected = torch.tensor(per_sample).unsqueeze(1) * mask
    assert torch.allclose(adv, expected, atol=1e-6)
    assert torch.equal(adv, ret)
    assert (adv[mask == 0] == 0).all()


def test_grpo_matches_torch_std_per_group() -> None:
    adv, _, _ = _run()
    scores = torch.tensor(SCORES)
    for uid in ("a", "b"):
        rows = torch.tensor(UIDS == uid)
        expected = (scores[rows] - scores[rows].mean()) / (torch.std(scores[rows]) + EPS)
        assert torch.allclose(adv[rows, 0], expected, atol=1e-6)


def test_grpo_equal_rewards_and_singleton() -> None:
    adv, _, _ = _run()
    assert (adv[[1, 4]] == 0).all()  # group b: all rewards equal
    assert adv[3, 0].item() == pytest.approx(0.7 / (1 + EPS))  # singleton: mean 0, std 1


def test_grpo_without_std_normalisation() -> None:
    adv, _, mask = _run(norm=False)
    expected = torch.tensor([2 / 3, 0.0, -1 / 3, 0.7, 0.0, -1 / 3]).unsqueeze(1) * mask
    assert torch.allclose(adv, expected, atol=1e-6)


def test_grpo_index_length_mismatch() -> None:
    rewards, mask = _inputs()
    with pytest.raises(RLCoreError, match="index"):
        compute_grpo_outcome_advantage(token_level_rewards=rewards, response_mask=mask, index=UIDS[:5], config=None)


# Pass@k example: a = [0.2, 1.0, 0.5] (winner row 2), b = [2, 2] (a tie: no margin), c = [0.3, 0.9] (winner
# row 6); row 5 has a masked (tool-output) token in the middle of its response.
PASSK_UIDS = np.array(["a", "b", "a", "c", "b", "a", "c"], dtype=object)
PASSK_SCORES = [0.2, 2.0, 1.0, 0.3, 2.0, 0.5, 0.9]


def _passk(norm: bool, uids: np.ndarray = PASSK_UIDS) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pass@k advantages, returns and mask of the Pass@k example (R = 4, scores on the last token)."""
    mask = torch.ones(len(PASSK_SCORES), 4)
    mask[5, 1] = 0.0
    rewards = torch.zeros_like(mask)
    rewards[:, -1] = torch.tensor(PASSK_SCORES)
    config = OmegaConf.create({"norm_adv_by_std_in_grpo": norm})
    adv, ret = compute_grpo_passk_outcome_advantage(
        token_level_rewards=rewards, response_mask=mask, index=uids, config=config
    )
    return adv, ret, mask


def test_grpo_passk_hand_computed() -> None:
    adv, ret, mask = _passk(norm=False)
    expected = torch.tensor([0.0, 0.0, 0.5, 0.0, 0.0, 0.0, 0.6]).unsqueeze(1) * mask
    assert torch.allclose(adv, expected, atol=1e-6)
    assert torch.equal(adv, ret)
    adv, _, mask = _passk(norm=True)
    std_a = torch.std(torch.tensor([0.2, 1.0, 0.5])).item()
    std_c = torch.std(torch.tensor([0.3, 0.9])).item()
    expected = torch.tensor([0, 0, 0.5 / (std_a + EPS), 0, 0, 0, 0.6 / (std_c + EPS)]).unsqueeze(1) * mask
    assert torch.allclose(adv, expected, atol=1e-5)


def test_grpo_passk_ties_and_masked_tokens() -> None:
    adv, _, mask = _passk(norm=True)
    assert (adv[[1, 4]] == 0).all()  # equal rewards: the winner's margin is 0
    assert (adv[mask == 0] == 0).all()  # the masked middle token of row 5 and nothing else


def test_grpo_passk_rejects_singleton_groups() -> None:
    uids = np.array(["a", "b", "a", "c", "b", "a", "d"], dtype=object)  # c and d have one response each
    with pytest.raises(RLCoreError, match="at least 2 responses per prompt.*'c' has 1"):
        _passk(norm=True, uids=uids)


def test_registration_and_config_defaults() -> None:
    manager = load_plugins()
    comp = manager.registry.get("advantage_estimator", "grpo")
    assert comp.dist == "rlcore-plugin-grpo"
    assert not comp.spec.needs_critic
    passk = manager.registry.get("advantage_estimator", "grpo_passk")
    assert passk.dist == "rlcore-plugin-grpo"
    assert passk.spec == AdvantageEstimatorSpec(min_group_size=2)
    assert hooks.config_defaults().tree() == {
        "norm_adv_by_std_in_grpo": True,
        "gdpo_reward_keys": None,
        "gdpo_reward_weights": None,
    }
    assert hooks.config_defaults().PATH == "algorithm", "the typed section is mounted at its PATH"
    from rlcore.config import default_config

    assert default_config(manager).algorithm.norm_adv_by_std_in_grpo is True


def test_hooks_module_does_not_import_torch() -> None:
    code = "import sys, rlcore_plugin_grpo.hooks; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


class TestGRPOContract(AdvantageEstimatorContract):
    """GRPO passes the advantage-estimator contract."""

    component_name = "grpo"


class TestDrGRPOContract(AdvantageEstimatorContract):
    """So does its Dr. GRPO variant (no std normalisation)."""

    component_name = "grpo"
    config_overrides = {"algorithm.norm_adv_by_std_in_grpo": False}


class TestGRPOPassKContract(AdvantageEstimatorContract):
    """Pass@k passes the contract (its batches have min_group_size or more samples per group)."""

    component_name = "grpo_passk"


def test_grpo_passk_trains(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Two real steps of the tiny task with Pass@k advantages."""
    task = make_tiny_task(tmp_path / "task")
    last, run_dir = tiny_run(tmp_path, tiny_model_dir, task, "algorithm.adv_estimator=grpo_passk")
    assert last["training/global_step"] == 2
    assert math.isfinite(last["actor/pg_loss"])
    assert last["critic/advantages/min"] >= 0.0  # only winners get a (non-negative) margin
    assert (run_dir / "metrics.jsonl").is_file()
