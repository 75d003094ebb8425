"""Hand-computed RLOO advantages (singletons, equal rewards, masked middle tokens), the registration, the
estimator contract and a short real run."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from rlcore_plugin_rloo.advantage import compute_rloo_outcome_advantage
from rlcore_testkit.contracts.algorithms import AdvantageEstimatorContract
from rlcore_testkit.runs import make_tiny_task, tiny_run

from rlcore.api.specs import AdvantageEstimatorSpec
from rlcore.errors import RLCoreError
from rlcore.plugins import load_plugins

# groups by uid, interleaved: a = [1, 0, 0], b = [2, 2] (equal), c = [0.7] (a singleton)
UIDS = np.array(["a", "b", "a", "c", "b", "a"], dtype=object)
SCORES = [1.0, 2.0, 0.0, 0.7, 2.0, 0.0]
# r minus the mean of the others: a: 1 - 0, 0 - 0.5, 0 - 0.5; b: 0; c: no others, baseline 0
EXPECTED = [1.0, 0.0, -0.5, 0.7, 0.0, -0.5]


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    """Rewards on the last token of R = 4 and a mask whose row 2 has a masked (tool) token at t = 1."""
    mask = torch.ones(6, 4)
    mask[2, 1] = 0.0
    mask[5, 3] = 0.0  # row 5 is one token shorter (right padding); its reward sits on t = 2
    rewards = torch.zeros_like(mask)
    last = torch.tensor([3, 3, 3, 3, 3, 2])
    rewards[torch.arange(6), last] = torch.tensor(SCORES)
    return rewards, mask


def test_rloo_hand_computed() -> None:
    rewards, mask = _inputs()
    adv, ret = compute_rloo_outcome_advantage(token_level_rewards=rewards, response_mask=mask, index=UIDS, config={})
    assert torch.allclose(adv, torch.tensor(EXPECTED).unsqueeze(1) * mask, atol=1e-6)
    assert torch.equal(adv, ret)


def test_rloo_is_n_over_n_minus_1_times_centred_reward() -> None:
    rewards, mask = _inputs()
    adv, _ = compute_rloo_outcome_advantage(token_level_rewards=rewards, response_mask=mask, index=UIDS, config={})
    rows = torch.tensor(UIDS == "a")
    scores = torch.tensor(SCORES)[rows]
    assert torch.allclose(adv[rows, 0], 3 / 2 * (scores - scores.mean()), atol=1e-6)


def test_rloo_singleton_equal_rewards_and_masked_tokens() -> None:
    rewards, mask = _inputs()
    adv, _ = compute_rloo_outcome_advantage(token_level_rewards=rewards, response_mask=mask, index=UIDS, config={})
    assert adv[3, 0].item() == pytest.approx(0.7)  # singleton: baseline 0
    assert (adv[[1, 4]] == 0).all()  # all rewards equal
    assert adv[2, 1].item() == 0.0 and adv[5, 3].item() == 0.0  # masked middle token and padding
    assert adv[2, 0].item() == adv[2, 2].item() == pytest.approx(-0.5)


def test_rloo_index_length_mismatch() -> None:
    rewards, mask = _inputs()
    with pytest.raises(RLCoreError, match="index"):
        compute_rloo_outcome_advantage(token_level_rewards=rewards, response_mask=mask, index=UIDS[:5], config={})


def test_registration() -> None:
    comp = load_plugins().registry.get("advantage_estimator", "rloo")
    assert comp.dist == "rlcore-plugin-rloo"
    assert comp.spec == AdvantageEstimatorSpec()


def test_hooks_module_does_not_import_torch() -> None:
    code = "import sys, rlcore_plugin_rloo.hooks; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


class TestRLOOContract(AdvantageEstimatorContract):
    """RLOO passes the advantage-estimator contract."""

    component_name = "rloo"


def test_rloo_trains(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Two real steps of the tiny task with RLOO advantages."""
    task = make_tiny_task(tmp_path / "task")
    last, _ = tiny_run(tmp_path, tiny_model_dir, task, "algorithm.adv_estimator=rloo")
    assert last["training/global_step"] == 2
    assert math.isfinite(last["actor/pg_loss"])
    assert "critic/vf_explained_var" not in last  # no critic
