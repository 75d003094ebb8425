"""Configs for tests and contract suites: rlcore's defaults plus every loaded plugin's sections."""

from __future__ import annotations

import copy
from typing import Any, TypeVar

from omegaconf import DictConfig, OmegaConf

from rlcore.api import Section

_S = TypeVar("_S", bound=Section)


def default_tree() -> DictConfig:
    """rlcore's default config with every loaded plugin's sections (interpolations unresolved)."""
    from rlcore import load_plugins
    from rlcore.api import default_config

    return default_config(load_plugins())


def contract_config(overrides: dict[str, Any], base: DictConfig | None = None) -> DictConfig:
    """A resolved copy of ``base`` (default: :func:`default_tree`) after applying dotted-key ``overrides``.

    Values are set as given (no string parsing), so dicts, lists and ``None`` can be passed directly.
    """
    config = copy.deepcopy(base) if base is not None else default_tree()
    for key, value in overrides.items():
        OmegaConf.update(config, key, value, merge=True)
    OmegaConf.resolve(config)
    return config


def contract_section(kind: type[_S], overrides: dict[str, Any], base: DictConfig | None = None) -> _S:
    """The typed section ``kind`` (e.g. :class:`rlcore.api.ActorConfig`) of :func:`contract_config` as the
    core hands it to a component: with the fields every loaded plugin declares at its key
    (:func:`rlcore.api.plugin_section`)."""
    from rlcore import load_plugins
    from rlcore.api import plugin_section

    return plugin_section(contract_config(overrides, base), kind, load_plugins())
