"""The dry run's checks read typed sections even where a section has problems of its own."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from rlcore.config import ConfigError, load_config
from rlcore.config.given_sections import given_section
from rlcore.config.schema import ActorRolloutRefConfig, TrainerConfig


def test_a_section_with_a_problem_of_its_own_keeps_the_values_given() -> None:
    config = load_config(overrides=["trainer.total_epochs=0", "trainer.val_only=true"])
    with pytest.raises(ConfigError, match="trainer.total_epochs must be a positive integer, got 0"):
        TrainerConfig.from_tree(config)
    trainer = given_section(TrainerConfig, config)
    assert trainer is not None
    assert (trainer.total_epochs, trainer.val_only) == (0, True)


def test_a_subsection_with_a_problem_keeps_its_values_and_the_rest_builds() -> None:
    config = load_config(overrides=["actor_rollout_ref.rollout.val_kwargs.n=0", "actor_rollout_ref.rollout.top_k=5"])
    policy = given_section(ActorRolloutRefConfig, config)
    assert policy is not None
    assert (policy.rollout.val_kwargs.n, policy.rollout.top_k) == (0, 5)
    assert policy.actor == ActorRolloutRefConfig.from_tree(load_config()).actor


def test_a_section_missing_from_the_tree_is_none() -> None:
    assert given_section(TrainerConfig, OmegaConf.create({"trainer": {"total_epochs": 0}})) is None
    assert given_section(TrainerConfig, OmegaConf.create({})) is None
