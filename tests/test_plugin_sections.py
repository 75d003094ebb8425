"""A plugin's ``config_defaults`` may return typed sections (:mod:`rlcore.config.plugin_sections`): one
mounted at its ``PATH``, a list of them, or instances inside the nested dict (one section at several keys);
a component receives its core section extended with the plugins' sections at its key."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from omegaconf import DictConfig, OmegaConf

from rlcore import hookimpl
from rlcore.api import ActorConfig, RewardModelConfig, Section, config_ref
from rlcore.config import ConfigError, default_config, load_config
from rlcore.config.plugin_sections import extended_section, plugin_fragment, plugin_section, sections_at
from rlcore.plugins import load_plugins, make_plugin_manager


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


@dataclass(frozen=True)
class ActorKeys(Section):
    """A plugin's keys of ``actor_rollout_ref.actor`` itself."""

    PATH = "actor_rollout_ref.actor"
    #: a temperature (> 0)
    tau: float = 1.0

    def problems(self) -> list[str]:
        """``tau`` must be positive."""
        return [] if self.tau > 0 else [f"{self.key('tau')} must be > 0, got {self.tau}"]


@dataclass(frozen=True)
class ActorSub(Section):
    """A plugin's subsection one level below ``actor_rollout_ref.actor``."""

    PATH = "actor_rollout_ref.actor.my_sub"
    #: a count
    count: int = 2


def _tree(tau: float, **actor: Any) -> DictConfig:
    """The default config with ``actor`` keys set and ``ActorKeys``'s (``tau``) and ``ActorSub``'s keys added."""
    config = load_config(overrides=[f"actor_rollout_ref.actor.{key}={value}" for key, value in actor.items()])
    OmegaConf.set_struct(config, False)
    OmegaConf.update(config, "actor_rollout_ref.actor", {"tau": tau, "my_sub": {"count": 2}}, merge=True)
    return config


def test_a_component_section_has_the_core_fields_and_the_plugins_fields() -> None:
    """What a policy loss receives: an ``ActorConfig`` that is also ``ActorKeys``, with ``ActorSub`` as a field."""
    found = sections_at([ActorKeys(), ActorSub(), Mounted(), {"actor_rollout_ref.actor": Anywhere()}], ActorConfig.PATH)
    assert found == [ActorKeys, ActorSub, Anywhere]
    kind = extended_section(ActorConfig, (ActorKeys, ActorSub))
    assert (
        extended_section(ActorConfig, (ActorKeys, ActorSub)) is kind
        and extended_section(ActorConfig, ()) is ActorConfig
    )
    section = kind.from_tree(_tree(tau=2.5, clip_ratio_high=0.28))
    assert isinstance(section, ActorConfig) and isinstance(section, ActorKeys)
    assert (section.tau, section.clip_ratio_high, section.my_sub) == (2.5, 0.28, ActorSub(count=2))  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"actor_rollout_ref.actor.tau must be > 0, got -1"):
        kind.from_tree(_tree(tau=-1.0))


def test_a_subsection_both_declare_keeps_the_core_fields() -> None:
    """PRIME declares keys of ``reward_model.model``: the reward manager still sees the core's ``model.path``."""
    manager = load_plugins()
    config = load_config(overrides=["reward_model.model.path=/judge", "reward_model.model.beta_train=0.1"])
    section = plugin_section(config, RewardModelConfig, manager)
    assert section.model.path == "/judge" and section.model.beta_train == 0.1  # type: ignore[attr-defined]
    assert section.overlong_buffer.enable is False  # type: ignore[attr-defined]  # DAPO's, one level below
    assert section.scorer_timeout == RewardModelConfig.scorer_timeout


class MountedPlugin:
    """A plugin declaring :class:`Mounted`'s keys."""

    @hookimpl
    def config_defaults(self) -> Section:
        """``algorithm.my_plugin``."""
        return Mounted()


def test_the_loader_follows_plugins_added_and_removed_after_a_load() -> None:
    """The loader keeps the defaults of a set of plugins between loads: a plugin added to the manager after a load
    declares its keys to the next load, and they are unknown again once it is removed; changing the copy that
    ``default_config`` returns changes no later load."""
    manager = make_plugin_manager()
    override = ["algorithm.my_plugin.weight=0.25"]
    with pytest.raises(ConfigError, match="unknown config key 'algorithm.my_plugin.weight'"):
        load_config(overrides=override, manager=manager)
    plugin = MountedPlugin()
    manager.add_plugin(plugin, "mounted")
    try:
        assert load_config(overrides=override, manager=manager).algorithm.my_plugin.weight == 0.25
        copy = default_config(manager)
        copy.algorithm.my_plugin.weight = 9.0
        assert load_config(manager=manager).algorithm.my_plugin.weight == 0.5
    finally:
        manager.remove_plugin(plugin, "mounted")
    with pytest.raises(ConfigError, match="unknown config key 'algorithm.my_plugin.weight'"):
        load_config(overrides=override, manager=manager)
