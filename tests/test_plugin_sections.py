"""A plugin's ``config_defaults`` may return typed sections (:mod:`rlcore.config.plugin_sections`): one
mounted at its ``PATH``, a list of them, or instances inside the nested dict (one section at several keys)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from rlcore.api import Section, config_ref
from rlcore.config import ConfigError, load_config
from rlcore.config.plugin_sections import plugin_fragment


@dataclass(frozen=True)
class Mounted(Section):
    """A section of a plugin at a fixed key."""

    PATH = "algorithm.my_plugin"
    #: a weight
    weight: float = 0.5
    #: follows the seed of the run
    seed: int = config_ref("trainer.seed")


@dataclass(frozen=True)
class Anywhere(Section):
    """A section mounted wherever the plugin places it."""

    #: a switch
    enable: bool = False


def test_a_section_is_mounted_at_its_path_with_its_references() -> None:
    assert plugin_fragment("p", Mounted()) == [{"algorithm": {"my_plugin": {"weight": 0.5, "seed": "${trainer.seed}"}}}]


def test_a_list_and_sections_inside_a_mapping() -> None:
    fragments = plugin_fragment("p", [Mounted(), {"critic": {"extra": Anywhere()}, "data": {"x": 1}}])
    assert fragments[1] == {"critic": {"extra": {"enable": False}}, "data": {"x": 1}}
    assert plugin_fragment("p", None) == [] and plugin_fragment("p", {}) == []


def test_a_section_without_a_path_or_another_type_names_the_plugin() -> None:
    with pytest.raises(ConfigError, match="plugin p: config_defaults returned a Anywhere without a PATH"):
        plugin_fragment("p", Anywhere())
    with pytest.raises(ConfigError, match="plugin p: config_defaults must return a mapping, a Section or a list"):
        plugin_fragment("p", 3)


def test_a_plugin_section_loads_and_reads_back_typed() -> None:
    """The GRPO plugin returns its typed section; the loaded config holds its keys, overridable."""
    from rlcore_plugin_grpo.config import GRPOAlgorithmConfig

    config = load_config(overrides=["algorithm.norm_adv_by_std_in_grpo=false"])
    section = GRPOAlgorithmConfig.from_tree(config)
    assert section.norm_adv_by_std_in_grpo is False and section.gdpo_reward_weights is None
