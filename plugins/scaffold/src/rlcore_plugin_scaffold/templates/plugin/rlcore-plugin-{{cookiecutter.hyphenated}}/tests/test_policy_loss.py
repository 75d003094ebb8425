"""The policy loss: clipping by hand and rlcore's contract suite."""

from __future__ import annotations

import math

import torch

from rlcore.api import ActorConfig
from rlcore_testkit.contracts import PolicyLossContract
from rlcore_plugin_{{ cookiecutter.underscored }}.policy_loss import compute_policy_loss


def test_ratio_is_clipped_for_positive_advantages() -> None:
    """With ratio e^0.5 > 1.2 and advantage 1 the loss is −1.2 and one token in one is clipped."""
    old = torch.zeros(1, 1)
    new = torch.full((1, 1), 0.5, requires_grad=True)
    loss, metrics = compute_policy_loss(
        old, new, torch.ones(1, 1), torch.ones(1, 1), "token-mean", ActorConfig(clip_ratio=0.2)
    )
    assert math.isclose(loss.item(), -1.2, rel_tol=1e-6)
    assert metrics["actor/pg_clipfrac"] == 1.0
    loss.backward()
    assert new.grad.abs().sum() == 0  # the clipped term has no gradient


class TestPolicyLossContract(PolicyLossContract):
    """rlcore's behavioural checks for ``actor_rollout_ref.actor.policy_loss.loss_mode={{ cookiecutter.hyphenated }}``."""

    component_name = "{{ cookiecutter.hyphenated }}"
