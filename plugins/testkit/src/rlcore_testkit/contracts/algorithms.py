"""Contract suites for ``advantage_estimator`` and ``policy_loss`` components.

Subclass a contract in a test module, name the subclass ``Test...`` and set ``component_name`` to the
registered name::

    from rlcore_testkit.contracts.algorithms import AdvantageEstimatorContract, PolicyLossContract

    class TestMyEstimator(AdvantageEstimatorContract):
        component_name = "my_estimator"
        group_relative = False          # not a group baseline: skip the equal-rewards test

    class TestMyLoss(PolicyLossContract):
        component_name = "my_loss"
        config_overrides = {"actor_rollout_ref.actor.clip_ratio_high": 0.28}

Components are resolved through the process-wide registry (:func:`rlcore.plugins.load_plugins`), so the
plugin under test must be installed (``pip install -e .``). The config handed to the component is
rlcore's default tree plus every plugin's ``config_defaults`` plus ``config_overrides`` (dotted keys),
and the component receives its typed section (:class:`rlcore.api.AlgorithmConfig` for estimators,
:class:`rlcore.api.ActorConfig` for losses, each with the fields the plugins declare there:
:func:`rlcore.api.plugin_section`), exactly as in a run. The suites check behaviour, not formulas: shapes, masking, finiteness,
determinism and the direction of the learning signal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pytest
import torch

from rlcore import load_plugins
from rlcore.api import (
    LOSS_AGG_MODES,
    ActorConfig,
    AdvantageEstimator,
    AdvantageEstimatorSpec,
    AlgorithmConfig,
    Component,
    Registry,
)
from rlcore_testkit.config import contract_section, default_tree

#: the registry record of an advantage estimator
EstimatorComponent = Component[AdvantageEstimatorSpec]
#: padded response length of the contract batches
RESPONSE_LENGTH = 6


def _response_mask(lengths: list[int], width: int = RESPONSE_LENGTH) -> torch.Tensor:
    """A right-padded ``[B, width]`` float mask with ``lengths[i]`` leading ones in row ``i``."""
    return (torch.arange(width).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)).float()


def _grad(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor.grad`` after ``loss.backward()``; a loss that never reached ``tensor`` fails the contract."""
    assert tensor.grad is not None, "loss.backward() left no gradient on log_prob"
    return tensor.grad


@dataclass
class EstimatorInputs:
    """One batch of estimator inputs: the scalar reward sits on each response's last valid token."""

    token_level_rewards: torch.Tensor
    response_mask: torch.Tensor
    index: np.ndarray
    values: torch.Tensor
    reward_baselines: torch.Tensor


class AdvantageEstimatorContract:
    """Tests every advantage estimator must pass; subclasses set ``component_name``.

    Class attributes a subclass may override: ``group_relative`` (whether equal rewards within a group
    must give zero advantages), ``config_overrides`` (dotted config keys) and ``atol``.
    """

    #: the registered advantage estimator under test
    component_name: ClassVar[str] = ""
    #: the estimator uses a group baseline: equal rewards within a group give zero advantages
    group_relative: ClassVar[bool] = True
    #: dotted config keys applied on top of the defaults, e.g. ``{"algorithm.gamma": 0.9}``
    config_overrides: ClassVar[dict[str, Any]] = {}
    #: absolute tolerance of "zero" and "equal"
    atol: ClassVar[float] = 1e-5

    @pytest.fixture
    def registry(self) -> Registry:
        """The process-wide component registry."""
        return load_plugins().registry

    @pytest.fixture
    def component(self, registry: Registry) -> EstimatorComponent:
        """The registry record of the estimator under test (its ``spec`` declares its needs)."""
        assert self.component_name, f"{type(self).__name__} must set component_name"
        return registry.get("advantage_estimator", self.component_name)

    @pytest.fixture
    def estimator(self, component: EstimatorComponent) -> AdvantageEstimator:
        """The imported estimator callable."""
        return component.load()

    @pytest.fixture(scope="class")
    @classmethod
    def config(cls) -> Any:
        """The typed ``algorithm`` section handed to the estimator (built once per test class)."""
        return contract_section(AlgorithmConfig, cls.config_overrides)

    def group_size(self, component: EstimatorComponent) -> int:
        """Samples per prompt in the contract batches: 3, or the estimator's ``min_group_size`` if larger."""
        return max(3, component.spec.min_group_size)

    def make_inputs(
        self, rewards: list[float], lengths: list[int], group_size: int, values: torch.Tensor | None = None
    ) -> EstimatorInputs:
        """Inputs for consecutive groups of ``group_size`` samples (uids ``p0``, ``p1``, ...).

        ``values`` defaults to a fixed pseudo-random ``[B, R]`` tensor that differs per sample.
        """
        mask = _response_mask(lengths)
        rewards_mat = torch.zeros_like(mask)
        rows = torch.arange(len(lengths))
        rewards_mat[rows, torch.tensor(lengths) - 1] = torch.tensor(rewards, dtype=torch.float32)
        index = np.array([f"p{i // group_size}" for i in range(len(lengths))], dtype=object)
        if values is None:
            values = torch.rand(len(lengths), RESPONSE_LENGTH, generator=torch.Generator().manual_seed(0))
        return EstimatorInputs(rewards_mat, mask, index, values, torch.zeros(len(lengths)))

    def default_inputs(self, component: EstimatorComponent) -> EstimatorInputs:
        """Two groups with varied rewards and response lengths."""
        size = self.group_size(component)
        rewards = [float(i % 3 == 0) + 0.25 * i for i in range(2 * size)]
        lengths = [1 + (i * 5) % RESPONSE_LENGTH for i in range(2 * size)]
        return self.make_inputs(rewards, lengths, size)

    def run_estimator(
        self, estimator: Callable[..., Any], component: EstimatorComponent, inputs: EstimatorInputs, config: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Call the estimator with the full keyword signature, as the controller does."""
        return estimator(
            token_level_rewards=inputs.token_level_rewards,
            response_mask=inputs.response_mask,
            index=inputs.index,
            config=config,
            values=inputs.values if component.spec.needs_critic else None,
            reward_baselines=inputs.reward_baselines if component.spec.needs_greedy_baseline else None,
        )

    def test_is_registered(self, registry: Registry) -> None:
        """The name resolves to a callable of kind ``advantage_estimator``."""
        assert registry.has("advantage_estimator", self.component_name)
        assert callable(registry.load("advantage_estimator", self.component_name))

    def test_spec_type(self, component: EstimatorComponent) -> None:
        """The declared needs are an :class:`~rlcore.api.specs.AdvantageEstimatorSpec` (which checked its
        fields when it was built)."""
        assert isinstance(component.spec, AdvantageEstimatorSpec), type(component.spec)

    def test_shapes_and_dtype(self, estimator: Callable[..., Any], component: EstimatorComponent, config: Any) -> None:
        """Advantages and returns are floating ``[B, R]`` tensors."""
        inputs = self.default_inputs(component)
        advantages, returns = self.run_estimator(estimator, component, inputs, config)
        for name, out in (("advantages", advantages), ("returns", returns)):
            assert isinstance(out, torch.Tensor), f"{name} is not a tensor"
            assert out.shape == inputs.response_mask.shape, f"{name} has shape {tuple(out.shape)}"
            assert out.is_floating_point(), f"{name} has dtype {out.dtype}"

    def test_finite(self, estimator: Callable[..., Any], component: EstimatorComponent, config: Any) -> None:
        """No NaN or infinity in either output."""
        advantages, returns = self.run_estimator(estimator, component, self.default_inputs(component), config)
        assert torch.isfinite(advantages).all()
        assert torch.isfinite(returns).all()

    def test_zero_at_masked_positions(
        self, estimator: Callable[..., Any], component: EstimatorComponent, config: Any
    ) -> None:
        """Advantages are exactly zero where ``response_mask`` is 0."""
        inputs = self.default_inputs(component)
        advantages, _ = self.run_estimator(estimator, component, inputs, config)
        assert (advantages[inputs.response_mask == 0] == 0).all()

    def test_deterministic(self, estimator: Callable[..., Any], component: EstimatorComponent, config: Any) -> None:
        """Two calls on the same inputs give identical outputs."""
        inputs = self.default_inputs(component)
        first = self.run_estimator(estimator, component, inputs, config)
        second = self.run_estimator(estimator, component, inputs, config)
        for a, b in zip(first, second):
            assert torch.equal(a, b)

    def test_inputs_unchanged(self, estimator: Callable[..., Any], component: EstimatorComponent, config: Any) -> None:
        """The estimator does not modify its input tensors in place."""
        inputs = self.default_inputs(component)
        copies = [inputs.token_level_rewards.clone(), inputs.response_mask.clone(), inputs.values.clone()]
        self.run_estimator(estimator, component, inputs, config)
        for before, after in zip(copies, (inputs.token_level_rewards, inputs.response_mask, inputs.values)):
            assert torch.equal(before, after)

    def test_equal_rewards_give_zero_advantages(
        self, estimator: Callable[..., Any], component: EstimatorComponent, config: Any
    ) -> None:
        """Within a group whose rewards are all equal nothing is better than the baseline."""
        if not self.group_relative:
            pytest.skip(f"{self.component_name} is not group-relative (group_relative = False)")
        size = self.group_size(component)
        inputs = self.make_inputs([1.0] * size + [0.0] * size, [RESPONSE_LENGTH] * (2 * size), size)
        advantages, _ = self.run_estimator(estimator, component, inputs, config)
        assert torch.allclose(advantages, torch.zeros_like(advantages), atol=self.atol)

    def test_better_sample_gets_higher_advantage(
        self, estimator: Callable[..., Any], component: EstimatorComponent, config: Any
    ) -> None:
        """In a group, the response with the higher reward has the higher (token-mean) advantage."""
        size = self.group_size(component)
        rewards = [1.0] + [0.0] * (size - 1) + [0.5] * size
        lengths = [RESPONSE_LENGTH - 1] * (2 * size)
        values = torch.linspace(0.0, 0.5, RESPONSE_LENGTH).expand(2 * size, -1).clone()
        inputs = self.make_inputs(rewards, lengths, size, values=values)
        advantages, _ = self.run_estimator(estimator, component, inputs, config)
        per_sample = (advantages * inputs.response_mask).sum(-1) / inputs.response_mask.sum(-1)
        assert per_sample[0] > per_sample[1] + self.atol, f"advantages {per_sample.tolist()}"

    def test_masked_values_do_not_matter(
        self, estimator: Callable[..., Any], component: EstimatorComponent, config: Any
    ) -> None:
        """For a critic-based estimator, values at masked positions do not change any valid output."""
        if not component.spec.needs_critic:
            pytest.skip(f"{self.component_name} does not use critic values")
        inputs = self.default_inputs(component)
        advantages, returns = self.run_estimator(estimator, component, inputs, config)
        inputs.values = torch.where(inputs.response_mask.bool(), inputs.values, torch.full_like(inputs.values, 1e4))
        advantages2, returns2 = self.run_estimator(estimator, component, inputs, config)
        valid = inputs.response_mask.bool()
        assert torch.allclose(advantages[valid], advantages2[valid], atol=self.atol)
        assert torch.allclose(returns[valid], returns2[valid], atol=self.atol)


@dataclass
class LossInputs:
    """One micro-batch of policy-loss inputs; ``log_prob`` is a leaf that requires grad."""

    old_log_prob: torch.Tensor
    log_prob: torch.Tensor
    advantages: torch.Tensor
    response_mask: torch.Tensor


class PolicyLossContract:
    """Tests every policy loss must pass; subclasses set ``component_name``.

    Each loss test runs once per aggregation mode of the ``loss_agg_mode`` fixture (all of rlcore's modes);
    a loss that supports fewer overrides that fixture. ``config_overrides`` (dotted keys) adjusts the
    actor config it receives. A loss whose value is not signed by the advantage (GPG's and CISPO's
    −c·A·logπ, SPPO's squared error) sets ``value_signed_by_advantage = False``: the two sign tests then
    check that the gradient moves every valid token's log-prob the advantage's way instead.
    """

    #: the registered policy loss under test
    component_name: ClassVar[str] = ""
    #: dotted config keys applied on top of the defaults
    config_overrides: ClassVar[dict[str, Any]] = {}
    #: absolute tolerance of "equal"
    atol: ClassVar[float] = 1e-6
    #: response lengths of the contract micro-batch (every row has at least one token)
    lengths: ClassVar[list[int]] = [RESPONSE_LENGTH, 4, 1, 3]
    #: whether the loss at π = π_old is negative for positive advantages and positive for negative ones
    value_signed_by_advantage: ClassVar[bool] = True

    @pytest.fixture
    def registry(self) -> Registry:
        """The process-wide component registry."""
        return load_plugins().registry

    @pytest.fixture
    def policy_loss(self, registry: Registry) -> Callable[..., Any]:
        """The imported policy loss callable."""
        assert self.component_name, f"{type(self).__name__} must set component_name"
        return registry.load("policy_loss", self.component_name)

    @pytest.fixture(params=LOSS_AGG_MODES)
    def loss_agg_mode(self, request: pytest.FixtureRequest) -> str:
        """The aggregation mode a test runs under."""
        return request.param

    @pytest.fixture(scope="class")
    @classmethod
    def base_config(cls) -> Any:
        """The default config tree, loaded once per test class."""
        return default_tree()

    @pytest.fixture
    def actor_config(self, base_config: Any, loss_agg_mode: str) -> Any:
        """The typed ``actor_rollout_ref.actor`` section, with ``loss_agg_mode`` set to the mode under test."""
        overrides = {**self.config_overrides, "actor_rollout_ref.actor.loss_agg_mode": loss_agg_mode}
        return contract_section(ActorConfig, overrides, base_config)

    def make_inputs(self, log_ratio_scale: float = 0.1, advantages: torch.Tensor | None = None) -> LossInputs:
        """Pseudo-random inputs with ``log_prob − old_log_prob`` of magnitude ``log_ratio_scale``."""
        gen = torch.Generator().manual_seed(0)
        mask = _response_mask(self.lengths)
        shape = mask.shape
        old = -torch.rand(shape, generator=gen) * 3.0
        log_prob = (old + log_ratio_scale * torch.randn(shape, generator=gen)).requires_grad_(True)
        if advantages is None:
            advantages = torch.randn(shape, generator=gen) * mask
        return LossInputs(old, log_prob, advantages, mask)

    def run_loss(
        self,
        policy_loss: Callable[..., Any],
        inputs: LossInputs,
        loss_agg_mode: str,
        config: Any,
        rollout_is_weights: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Call the loss as ``build_actor_loss`` does."""
        return policy_loss(
            inputs.old_log_prob,
            inputs.log_prob,
            inputs.advantages,
            inputs.response_mask,
            loss_agg_mode,
            config,
            rollout_is_weights=rollout_is_weights,
        )

    def test_is_registered(self, registry: Registry) -> None:
        """The name resolves to a callable of kind ``policy_loss``."""
        assert registry.has("policy_loss", self.component_name)
        assert callable(registry.load("policy_loss", self.component_name))

    def test_scalar_loss_backpropagates(
        self, policy_loss: Callable[..., Any], loss_agg_mode: str, actor_config: Any
    ) -> None:
        """The loss is a finite scalar whose gradient reaches ``log_prob`` at valid tokens only."""
        inputs = self.make_inputs()
        loss, _ = self.run_loss(policy_loss, inputs, loss_agg_mode, actor_config)
        assert isinstance(loss, torch.Tensor) and loss.dim() == 0, "the loss must be a scalar tensor"
        assert torch.isfinite(loss)
        assert loss.requires_grad, "the loss does not depend on log_prob"
        loss.backward()
        grad = inputs.log_prob.grad
        assert grad is not None and torch.isfinite(grad).all()
        assert (grad[inputs.response_mask == 0] == 0).all(), "masked tokens received a gradient"
        assert grad[inputs.response_mask == 1].abs().sum() > 0, "no valid token received a gradient"

    def test_metrics_are_floats(self, policy_loss: Callable[..., Any], loss_agg_mode: str, actor_config: Any) -> None:
        """The metrics are a dict of python floats keyed by strings."""
        _, metrics = self.run_loss(policy_loss, self.make_inputs(), loss_agg_mode, actor_config)
        assert isinstance(metrics, dict)
        for key, value in metrics.items():
            assert isinstance(key, str)
            assert isinstance(value, float) and not isinstance(value, bool), f"metric {key} is {type(value).__name__}"

    def test_positive_advantage_at_ratio_one_gives_negative_loss(
        self, policy_loss: Callable[..., Any], loss_agg_mode: str, actor_config: Any
    ) -> None:
        """With π = π_old, positive advantages make the loss negative (minimising it raises their log-prob);
        without ``value_signed_by_advantage``, gradient descent raises every valid token's log-prob."""
        inputs = self.make_inputs(log_ratio_scale=0.0, advantages=_response_mask(self.lengths))
        loss, _ = self.run_loss(policy_loss, inputs, loss_agg_mode, actor_config)
        if self.value_signed_by_advantage:
            assert loss.item() < 0
        loss.backward()
        grad = _grad(inputs.log_prob)[inputs.response_mask == 1]
        if self.value_signed_by_advantage:
            assert (grad <= 0).all(), "gradient descent must raise the log-prob of good tokens"
        else:
            assert (grad < 0).all(), "gradient descent must raise the log-prob of good tokens"

    def test_negative_advantage_at_ratio_one_gives_positive_loss(
        self, policy_loss: Callable[..., Any], loss_agg_mode: str, actor_config: Any
    ) -> None:
        """With π = π_old, negative advantages make the loss positive; without
        ``value_signed_by_advantage``, gradient descent lowers every valid token's log-prob."""
        inputs = self.make_inputs(log_ratio_scale=0.0, advantages=-_response_mask(self.lengths))
        loss, _ = self.run_loss(policy_loss, inputs, loss_agg_mode, actor_config)
        if self.value_signed_by_advantage:
            assert loss.item() > 0
        else:
            loss.backward()
            assert (_grad(inputs.log_prob)[inputs.response_mask == 1] > 0).all(), "bad tokens' log-prob must fall"

    def test_masked_positions_do_not_matter(
        self, policy_loss: Callable[..., Any], loss_agg_mode: str, actor_config: Any
    ) -> None:
        """Arbitrary (finite) inputs at masked positions leave the loss unchanged."""
        inputs = self.make_inputs()
        loss, _ = self.run_loss(policy_loss, inputs, loss_agg_mode, actor_config)
        valid = inputs.response_mask.bool()
        noisy = LossInputs(
            torch.where(valid, inputs.old_log_prob, torch.full_like(inputs.old_log_prob, -30.0)),
            torch.where(valid, inputs.log_prob.detach(), torch.full_like(inputs.old_log_prob, 5.0)),
            torch.where(valid, inputs.advantages, torch.full_like(inputs.advantages, 1e3)),
            inputs.response_mask,
        )
        noisy_loss, _ = self.run_loss(policy_loss, noisy, loss_agg_mode, actor_config)
        assert torch.allclose(loss.detach(), noisy_loss.detach(), atol=self.atol)

    def test_deterministic(self, policy_loss: Callable[..., Any], loss_agg_mode: str, actor_config: Any) -> None:
        """Two calls on the same inputs give the same loss and metrics."""
        inputs = self.make_inputs()
        loss1, metrics1 = self.run_loss(policy_loss, inputs, loss_agg_mode, actor_config)
        loss2, metrics2 = self.run_loss(policy_loss, inputs, loss_agg_mode, actor_config)
        assert torch.equal(loss1.detach(), loss2.detach())
        assert metrics1 == metrics2

    def test_unit_rollout_is_weights_change_nothing(
        self, policy_loss: Callable[..., Any], loss_agg_mode: str, actor_config: Any
    ) -> None:
        """Importance weights of 1 give the same loss as no weights."""
        inputs = self.make_inputs()
        loss, _ = self.run_loss(policy_loss, inputs, loss_agg_mode, actor_config)
        ones = torch.ones_like(inputs.old_log_prob)
        weighted, _ = self.run_loss(policy_loss, inputs, loss_agg_mode, actor_config, rollout_is_weights=ones)
        assert torch.allclose(loss.detach(), weighted.detach(), atol=self.atol)

    def test_extreme_log_ratios_stay_finite(
        self, policy_loss: Callable[..., Any], loss_agg_mode: str, actor_config: Any
    ) -> None:
        """Log-ratios of ±50 (a stale or diverged policy) give a finite loss and gradient."""
        inputs = self.make_inputs()
        signs = torch.where(torch.arange(inputs.old_log_prob.numel()) % 2 == 0, 50.0, -50.0)
        inputs.log_prob = (inputs.old_log_prob + signs.view_as(inputs.old_log_prob)).requires_grad_(True)
        loss, _ = self.run_loss(policy_loss, inputs, loss_agg_mode, actor_config)
        assert torch.isfinite(loss)
        loss.backward()
        assert torch.isfinite(_grad(inputs.log_prob)).all()

    def test_inputs_unchanged(self, policy_loss: Callable[..., Any], loss_agg_mode: str, actor_config: Any) -> None:
        """The loss does not modify its input tensors in place."""
        inputs = self.make_inputs()
        copies = [inputs.old_log_prob.clone(), inputs.log_prob.detach().clone(), inputs.advantages.clone()]
        self.run_loss(policy_loss, inputs, loss_agg_mode, actor_config)
        for before, after in zip(copies, (inputs.old_log_prob, inputs.log_prob.detach(), inputs.advantages)):
            assert torch.equal(before, after)
