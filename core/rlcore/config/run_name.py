"""A bundled task's run is named after the algorithm that runs: the presets applied on top of the task, then
the advantage estimator when it is not the one they choose (``arith-dapo``, ``arith-rloo``). The name is set
before the config is resolved (:func:`rlcore.config.loader.load_config` calls :func:`name_after_presets`), so
that every key built from ``trainer.experiment_name`` (the checkpoint folder, the rollout traces' name) follows
it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rlcore.errors import RLCoreError

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from rlcore.plugins import PluginManager


def task_presets(presets: list[str], manager: PluginManager) -> list[str]:
    """The presets of ``presets`` that are bundled tasks (their :class:`~rlcore.api.specs.PresetSpec` names a
    ``task``)."""
    registry = manager.registry
    return [name for name in presets if registry.has("preset", name) and registry.spec("preset", name).task]


def _estimator_name(name: str, manager: PluginManager) -> str:
    """An advantage estimator's registered name (``name`` may be an alias; an unknown one is reported by the
    component check and kept as given)."""
    try:
        return manager.registry.get("advantage_estimator", name).name
    except RLCoreError:
        return name


def name_after_presets(
    config: DictConfig, fragments: Mapping[str, Mapping[str, Any]], default_estimator: str, manager: PluginManager
) -> None:
    """Name a bundled task's run after the algorithm that runs: the presets applied on top of the task, then the
    advantage estimator when it is not the one they choose. With ``--preset dapo`` the ``arith-cpu`` task's
    ``arith-grpo`` becomes ``arith-dapo``; with ``algorithm.adv_estimator=rloo`` it becomes ``arith-rloo``
    (``trainer.experiment_name``, hence the run directory, the checkpoint folder and the trackers' run names).
    A name set by a file or on the command line (one that differs from the task preset's) is kept.

    Args:
        config: the merged config, not yet resolved.
        fragments: each applied preset's settings as dotted keys, in the order applied.
        default_estimator: ``algorithm.adv_estimator`` of the defaults.
        manager: the plugin manager (the presets' specs, the estimators' names).
    """
    presets = list(fragments)
    tasks = task_presets(presets, manager)
    if len(tasks) != 1:
        return
    task = tasks[0]
    own_name = fragments[task].get("trainer.experiment_name")
    if own_name is None or config.trainer.experiment_name != own_name:
        return
    chosen = default_estimator
    for fragment in fragments.values():
        chosen = str(fragment.get("algorithm.adv_estimator", chosen))
    stem = manager.registry.spec("preset", task).task or task
    parts = [stem, *(name for name in presets if name not in tasks)]
    estimator = _estimator_name(str(config.algorithm.adv_estimator), manager)
    if estimator != _estimator_name(chosen, manager):
        parts.append(estimator)
    if len(parts) > 1:
        config.trainer.experiment_name = "-".join(parts)
