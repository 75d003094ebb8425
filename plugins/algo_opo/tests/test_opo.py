"""Hand-computed OPO advantages (length-weighted baseline, singletons, empty rows, masked middle tokens), the
registration, the estimator contract and a short real run of the default tiny task."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from rlcore_plugin_opo.advantage import compute_opo_outcome_advantage
from rlcore_testkit.contracts import AdvantageEstimatorContract
from rlcore_testkit.runs import make_tiny_task, tiny_run

from rlcore.errors import RLCoreError
from rlcore.plugins import load_plugins

UIDS = np.array(["a", "a", "b", "a", "c"], dtype=object)
SCORES = [1.0, 0.0, 0.7, 0.5, 2.0]
LENGTHS = [4, 2, 3, 1, 2]  # row 1 has a masked middle token (tool output): 2 valid tokens of 3


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    mask = torch.zeros(5, 4)
    for row, length in enumerate(LENGTHS):
        mask[row, :length] = 1.0
    mask[1, 1], mask[1, 2] = 0.0, 1.0
    rewards = torch.zeros_like(mask)
    for row, score in enumerate(SCORES):
        rewards[row, int(mask[row].nonzero().max())] = score
    return rewards, mask


def test_opo_hand_computed() -> None:
    rewards, mask = _inputs()
    adv, returns = compute_opo_outcome_advantage(token_level_rewards=rewards, response_mask=mask, index=UIDS)
    baseline_a = (4 * 1.0 + 2 * 0.0 + 1 * 0.5) / (4 + 2 + 1)  # = 4.5 / 7
    expected = [1.0 - baseline_a, 0.0 - baseline_a, 0.7, 0.5 - baseline_a, 2.0]  # b, c: groups of one
    assert torch.allclose(adv, torch.tensor(expected).unsqueeze(-1) * mask, atol=1e-6)
    assert torch.equal(adv, returns)
    assert adv[1, 1] == 0.0


def test_opo_equal_lengths_is_the_group_mean_and_errors() -> None:
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0], [0.0, 3.0]])
    adv, _ = compute_opo_outcome_advantage(
        token_level_rewards=rewards, response_mask=torch.ones(3, 2), index=["x", "x", "x"]
    )
    assert adv[:, 0].tolist() == pytest.approx([1 - 4 / 3, -4 / 3, 3 - 4 / 3])
    with pytest.raises(RLCoreError, match="index"):
        compute_opo_outcome_advantage(token_level_rewards=rewards, response_mask=torch.ones(3, 2), index=["x"])


def test_registration() -> None:
    assert load_plugins().registry.get("advantage_estimator", "opo").dist == "rlcore-plugin-opo"


def test_hooks_module_does_not_import_torch() -> None:
    code = "import sys, rlcore_plugin_opo.hooks; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


class TestOPOEstimatorContract(AdvantageEstimatorContract):
    """The OPO estimator passes the advantage-estimator contract."""

    component_name = "opo"


def test_opo_trains(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Two real steps of the tiny task with the OPO estimator."""
    task = make_tiny_task(tmp_path / "task")
    last, _ = tiny_run(tmp_path, tiny_model_dir, task, "algorithm.adv_estimator=opo")
    assert last["training/global_step"] == 2
    assert math.isfinite(last["actor/pg_loss"])
