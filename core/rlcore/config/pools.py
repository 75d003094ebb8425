"""How many ranks each pool of a run holds, derived from the config alone (no Ray): the placement
(``trainer.placement``), the reward model's own pool and the bundles one node needs. The controller's
placement (:mod:`rlcore.controller.placement`) and the dry run's checks both use these.
"""

from __future__ import annotations

from omegaconf import DictConfig

from rlcore.config.keys import positive_key
from rlcore.config.problems import ConfigError

#: the values of ``trainer.placement``
PLACEMENTS = ("colocated", "split")


def placement_mode(config: DictConfig) -> str:
    """``trainer.placement`` validated: ``colocated`` or ``split`` (which needs ``trainer.executor=ray``)."""
    mode = str(config.trainer.placement)
    if mode not in PLACEMENTS:
        raise ConfigError(f"trainer.placement must be one of {', '.join(PLACEMENTS)}, got {mode!r}")
    if mode == "split" and config.trainer.executor != "ray":
        raise ConfigError(
            f"trainer.placement=split puts the rollout on its own workers and needs trainer.executor=ray "
            f"(got {config.trainer.executor!r})"
        )
    return mode


def reward_pool(config: DictConfig) -> bool:
    """Whether the reward model gets a pool of its own (``reward_model.enable_resource_pool``), validated: it
    needs ``trainer.executor=ray``, and ``reward_model.nnodes`` (0: ``trainer.nnodes``) must be
    ``trainer.nnodes`` (every pool spans the same nodes)."""
    section = config.reward_model
    if not section.enable_resource_pool:
        return False
    if config.trainer.executor != "ray":
        raise ConfigError(
            "reward_model.enable_resource_pool=true puts the reward model on workers of its own and needs "
            f"trainer.executor=ray (got {config.trainer.executor!r})"
        )
    nodes = section.nnodes
    if nodes not in (0, config.trainer.nnodes):
        raise ConfigError(
            f"reward_model.nnodes={nodes}: rlcore places every pool on the same nodes; set it to trainer.nnodes "
            f"({config.trainer.nnodes}) or 0"
        )
    return True


def bundles_per_node(config: DictConfig) -> int:
    """How many bundles (ranks of every pool) one node holds."""
    per_node = positive_key(config, "trainer.n_gpus_per_node")
    if placement_mode(config) == "split":
        per_node += positive_key(config, "trainer.rollout_n_gpus_per_node")
    if reward_pool(config):
        per_node += positive_key(config, "reward_model.n_gpus_per_node")
    return per_node
