"""Hand-computed OTB advantages (energy-weighted per-token baseline, the zero tail, singletons, masked middle
tokens, IS weights), Σπ² from the actor's forward against a direct softmax, the configuration checks, the
registration, the estimator contract and a short real run of the default tiny task."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from rlcore_plugin_otb.advantage import compute_optimal_token_baseline_advantage as otb
from rlcore_testkit.contracts import AdvantageEstimatorContract
from rlcore_testkit.contracts.algorithms import EstimatorInputs
from rlcore_testkit.contracts.backend import make_batch
from rlcore_testkit.runs import make_tiny_task, tiny_run

from rlcore.algos import sum_pi_squared_from_logits
from rlcore.cli import cli
from rlcore.errors import RLCoreError
from rlcore.plugins import load_plugins

OTB = "algorithm.adv_estimator=optimal_token_baseline"
CALC = "actor_rollout_ref.actor.calculate_sum_pi_squared"


def _energy_inputs(pi: list[list[float]], spi: list[list[float]]) -> tuple[torch.Tensor, torch.Tensor]:
    """``old_log_probs`` and ``sum_pi_squared`` from per-token π(y_t) and Σπ² (so w_t = 1 − 2π + Σπ²)."""
    return torch.tensor(pi).log(), torch.tensor(spi)


def _case() -> dict[str, Any]:
    """Group ``a`` = rows 0 (3 tokens, reward 1) and 1 (2 tokens, reward 2); row 2 alone in group ``b``.
    Energies: row 0 w = 0.5 each (π = Σπ² = 0.5), row 1 w = (0.75, 0.5) (π = Σπ² = 0.25, then 0.5)."""
    mask = torch.tensor([[1.0, 1, 1], [1, 1, 0], [1, 0, 0]])
    rewards = torch.tensor([[0.0, 0, 1], [0, 2, 0], [0.7, 0, 0]])
    old, spi = _energy_inputs(
        [[0.5, 0.5, 0.5], [0.25, 0.5, 0.9], [0.5, 0.9, 0.9]], [[0.5] * 3, [0.25, 0.5, 0.9], [0.5] * 3]
    )
    return {
        "token_level_rewards": rewards,
        "response_mask": mask,
        "index": np.array(["a", "a", "b"], dtype=object),
        "old_log_probs": old,
        "sum_pi_squared": spi,
    }


def test_otb_hand_computed() -> None:
    """W_0 = (0.5, 1.0, 1.5), W_1 = (0.75, 1.25); G_0 = (1, 1, 1), G_1 = (2, 2, 0):
    B_t=0 = (1·0.5 + 2·0.75)/1.25 = 1.6, B_t=1 = (1·1 + 2·1.25)/2.25 = 14/9; row 0 is the longest alone, so its
    baseline is 0 from t = 2 (the second-longest length) on; row 2 (a group of one) keeps its return."""
    adv, returns = otb(**_case())
    expected = torch.tensor([[1 - 1.6, 1 - 14 / 9, 1.0], [2 - 1.6, 2 - 14 / 9, 0.0], [0.7, 0.0, 0.0]])
    torch.testing.assert_close(adv, expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(returns, torch.tensor([[1.0, 1, 1], [2, 2, 0], [0.7, 0, 0]]))


def test_otb_is_weights_scale_the_energy_by_their_square() -> None:
    """ρ = 2 on row 1 makes its w four times larger: W_1 = (3, 5), so B_t=0 = (0.5 + 2·3)/3.5 = 13/7."""
    case = _case()
    case["rollout_is_weights"] = torch.tensor([[1.0, 1, 1], [2, 2, 2], [1, 1, 1]])
    adv, _ = otb(**case)
    assert adv[0, 0].item() == pytest.approx(1 - 13 / 7, abs=1e-6)
    assert adv[1, 1].item() == pytest.approx(2 - (1 * 1.0 + 2 * 5) / 6, abs=1e-6)


def test_otb_equal_lengths_keep_the_tail_and_masked_tokens_add_nothing() -> None:
    """Two 2-token responses (one with a masked middle token between them): no zero tail; the masked token
    adds neither energy nor reward and gets advantage 0."""
    mask = torch.tensor([[1.0, 1, 0], [1, 0, 1]])
    rewards = torch.tensor([[0.0, 1, 0], [0, 0, 3]])
    old, spi = _energy_inputs([[0.5, 0.5, 0.5], [0.25, 0.01, 0.5]], [[0.5] * 3, [0.25, 0.9, 0.5]])
    adv, returns = otb(
        token_level_rewards=rewards, response_mask=mask, index=["g", "g"], old_log_probs=old, sum_pi_squared=spi
    )
    # W_0 = (0.5, 1.0, 1.0), W_1 = (0.75, 0.75, 1.25); G_0 = (1, 1, 0), G_1 = (3, 3, 3)
    b0 = (1 * 0.5 + 3 * 0.75) / 1.25
    b1 = 1 * 1.0 / 1.0  # row 1 is masked at t = 1
    b2 = 3 * 1.25 / 1.25  # row 0 ended
    expected = torch.tensor([[1 - b0, 1 - b1, 0.0], [3 - b0, 0.0, 3 - b2]])
    torch.testing.assert_close(adv, expected, atol=1e-6, rtol=0)
    assert returns[1, 1] == 3.0


def test_otb_bad_inputs_are_named() -> None:
    case = _case()
    with pytest.raises(RLCoreError, match="sum_pi_squared has shape"):
        otb(**{**case, "sum_pi_squared": case["sum_pi_squared"][:, :2]})
    with pytest.raises(RLCoreError, match="index"):
        otb(**{**case, "index": ["a"]})


def test_sum_pi_squared_of_the_actor_forward(tiny_model_dir: Path, tiny_tokenizer: Any) -> None:
    """Σπ² from :func:`rlcore.modelkit.hf_models.response_outputs` (padded and packed) equals Σ softmax(z/T)²
    of the model's logits at the positions that predict the response tokens."""
    from transformers import AutoModelForCausalLM

    from rlcore.modelkit.hf_models import response_outputs

    logits = torch.tensor([[0.0, 1.0, -2.0], [3.0, 3.0, 3.0]])
    torch.testing.assert_close(sum_pi_squared_from_logits(logits), (logits.softmax(-1) ** 2).sum(-1))
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    batch = make_batch(tiny_tokenizer)
    length = batch["responses"].shape[1]
    with torch.no_grad():
        full = model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], position_ids=batch["position_ids"]
        ).logits[:, -length - 1 : -1]
        expected = ((full / 0.7).softmax(-1) ** 2).sum(-1)
        mask = batch["response_mask"].bool()
        for packed in (False, True):
            out = response_outputs(
                model, batch, 0.7, with_entropy=False, with_sum_pi_squared=True, remove_padding=packed
            )
            torch.testing.assert_close(out.require("sum_pi_squared")[mask], expected[mask], atol=1e-5, rtol=0)
            assert out.entropy is None
            assert (out.require("sum_pi_squared")[mask] >= out.require("log_probs")[mask].exp() ** 2 - 1e-6).all()


@pytest.mark.parametrize(
    "extra, message",
    [
        ((OTB,), f"reads the actor's Σπ²: set {CALC}=true"),
        ((f"{CALC}=true",), "does not read Σπ²"),
        ((OTB, f"{CALC}=true", "algorithm.rollout_correction.bypass_mode=true"), "bypass_mode=true skips"),
    ],
)
def test_configuration_errors(extra: tuple[str, ...], message: str) -> None:
    result = CliRunner().invoke(cli, ["run", "--dry-run", "trainer.device=cpu", *extra])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_a_backend_without_sum_pi_squared_is_refused() -> None:
    """A training backend whose registration lacks ``sum_pi_squared=True`` is refused by the dry run."""
    from rlcore.config import ConfigError
    from rlcore.config.loader import load_config
    from rlcore.run import _check_sum_pi_squared

    registry = load_plugins().registry
    config = load_config([], [OTB, f"{CALC}=true"])
    estimator = registry.get("advantage_estimator", "optimal_token_baseline")
    _check_sum_pi_squared(config, estimator, registry.get("training_backend", "fsdp"))  # fsdp computes it
    without = [
        name
        for name in registry.names("training_backend")
        if not registry.get("training_backend", name).spec.sum_pi_squared
    ]
    if not without:
        pytest.skip("every installed training backend computes Σπ²")
    config.actor_rollout_ref.actor.strategy = without[0]
    with pytest.raises(ConfigError, match="does not compute Σπ²"):
        _check_sum_pi_squared(config, estimator, registry.get("training_backend", without[0]))


def test_registration() -> None:
    component = load_plugins().registry.get("advantage_estimator", "optimal_token_baseline")
    assert component.dist == "rlcore-plugin-otb"
    assert component.spec.batch_keys == {"old_log_probs", "sum_pi_squared"}


def test_hooks_module_does_not_import_torch() -> None:
    code = "import sys, rlcore_plugin_otb.hooks; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


class TestOTBEstimatorContract(AdvantageEstimatorContract):
    """The OTB estimator passes the advantage-estimator contract, given energies from random logits."""

    component_name = "optimal_token_baseline"

    def run_estimator(
        self, estimator: Any, component: Any, inputs: EstimatorInputs, config: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The contract's call plus ``old_log_probs`` and ``sum_pi_squared`` of fixed random distributions."""
        logits = torch.randn(*inputs.response_mask.shape, 11, generator=torch.Generator().manual_seed(0))
        return estimator(
            token_level_rewards=inputs.token_level_rewards,
            response_mask=inputs.response_mask,
            index=inputs.index,
            config=config,
            old_log_probs=logits.log_softmax(-1)[..., 0],
            sum_pi_squared=sum_pi_squared_from_logits(logits),
        )


def test_the_controller_passes_the_is_weights_when_the_batch_has_them() -> None:
    """``optional_batch_keys``: the trainer hands ``rollout_is_weights`` to the estimator only when present."""
    from rlcore.api import AlgorithmConfig
    from rlcore.api.batch import Batch
    from rlcore.config.loader import load_config
    from rlcore.controller.trainer import Trainer

    case = _case()
    weights = torch.tensor([[1.0, 1, 1], [2, 2, 2], [1, 1, 1]])
    trainer = Trainer.__new__(Trainer)  # only _compute_advantage's three attributes are needed
    trainer.algorithm_section = AlgorithmConfig.from_tree(load_config([], [OTB, f"{CALC}=true"]))
    trainer.reward_extra_keys = ()
    trainer.estimator = load_plugins().registry.get("advantage_estimator", "optimal_token_baseline")
    for extra in ({}, {"rollout_is_weights": weights}):
        batch = Batch.from_dict(
            {
                "token_level_rewards": case["token_level_rewards"],
                "response_mask": case["response_mask"],
                "uid": case["index"],
                "old_log_probs": case["old_log_probs"],
                "sum_pi_squared": case["sum_pi_squared"],
                **extra,
            }
        )
        trainer._compute_advantage(batch)
        expected, _ = otb(**case, **({"rollout_is_weights": weights} if extra else {}))
        torch.testing.assert_close(batch["advantages"], expected)


def test_otb_trains(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Two real steps of the tiny task with the OTB estimator (Σπ² from the FSDP actor) and token-level rollout
    importance sampling (so the estimator also receives the IS weights)."""
    task = make_tiny_task(tmp_path / "task")
    last, _ = tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        OTB,
        f"{CALC}=true",
        "actor_rollout_ref.rollout.calculate_log_probs=true",
        "algorithm.rollout_correction.rollout_is=token",
    )
    assert last["training/global_step"] == 2
    assert math.isfinite(last["actor/pg_loss"])
