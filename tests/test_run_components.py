"""The components of a run are resolved once (:class:`rlcore.controller.components.RunComponents`), and the
engines' optional abilities are protocols checked with ``isinstance`` (:mod:`rlcore.api`)."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import torch

from rlcore.api import (
    Batch,
    RolloutConfig,
    SupportsClose,
    SupportsLiveWeights,
    SupportsSamplingState,
    SupportsSharedWeights,
    SupportsWeightChecksum,
    SupportsWeightStream,
)
from rlcore.config import Problems, load_config
from rlcore.controller.components import RunComponents
from rlcore.controller.trainer import Trainer
from rlcore.plugins import get_component, load_plugins
from rlcore.registry import Component
from rlcore.run import check_components
from rlcore.run_context import RunContext


def test_check_components_builds_the_bundle_from_the_config() -> None:
    manager = load_plugins()
    config = load_config([], ["algorithm.batch_filters=[dapo-groups]"], ["dapo"], manager)
    components = check_components(config, manager)
    assert isinstance(components, RunComponents)
    assert components.estimator.name == config.algorithm.adv_estimator
    assert components.estimator.spec.min_group_size >= 1
    assert components.policy_loss.name == config.actor_rollout_ref.actor.policy_loss.loss_mode
    assert components.actor_backend.name == "fsdp"
    assert components.reward_manager.name == "dapo"
    assert [f.name for f in components.batch_filters] == ["dapo-groups"]
    assert components.extensions == ()


def test_an_unknown_component_gives_no_bundle_and_names_its_key() -> None:
    manager = load_plugins()
    problems = Problems()
    config = load_config([], ["algorithm.adv_estimator=nope", "algorithm.batch_filters=[nope]"], [], manager)
    assert check_components(config, manager, problems) is None
    assert problems.items[0].startswith("algorithm.adv_estimator=nope: unknown advantage_estimator 'nope'")
    assert problems.items[1].startswith("algorithm.batch_filters=nope: unknown batch_filter 'nope'")


def _drop_odd_rows(batch: Batch, config: Any) -> tuple[Batch, dict[str, float]]:
    """A batch filter that keeps the even rows."""
    return batch[list(range(0, len(batch), 2))], {"kept": float((len(batch) + 1) // 2)}


def test_the_trainer_calls_the_components_it_receives() -> None:
    """The trainer uses the bundle it is given, not the names in the config: here the config names no batch
    filter and the grpo estimator, the bundle a filter and rloo."""
    manager = load_plugins()
    config = load_config([], ["algorithm.adv_estimator=grpo", "algorithm.batch_filters=[]"], [], manager)
    resolved = check_components(config, manager)
    assert resolved is not None
    keep_even = Component(kind="batch_filter", name="keep_even", target=_drop_odd_rows, plugin="test")
    components = RunComponents(
        estimator=manager.registry.get("advantage_estimator", "rloo"),
        policy_loss=resolved.policy_loss,
        actor_backend=resolved.actor_backend,
        reward_manager=resolved.reward_manager,
        batch_filters=(keep_even,),
        extensions=(),
    )
    trainer = Trainer(config, RunContext(config=config, run_dir=Path()), manager, components)
    assert trainer.estimator.name == "rloo"
    metrics: dict[str, float] = {}
    kept = trainer._apply_filters(Batch.from_dict({"x": torch.arange(5)}), metrics)
    assert kept["x"].tolist() == [0, 2, 4] and metrics == {"kept": 3.0}


def test_the_hf_rollout_engine_has_its_abilities(tiny_model_dir: Path, tiny_tokenizer: Any) -> None:
    """The bundled HF engine checks its weights exactly, shares a CPU actor's tensors and saves its sampling
    state; it runs no processes of its own."""
    section = RolloutConfig.from_tree(load_config())
    engine = get_component("rollout_engine", "hf")(
        str(tiny_model_dir), tiny_tokenizer, section, device=torch.device("cpu"), dtype=torch.float32
    )
    assert isinstance(engine, SupportsWeightChecksum)
    assert isinstance(engine, SupportsSharedWeights)
    assert isinstance(engine, SupportsSamplingState)
    assert not isinstance(engine, SupportsClose)
    assert not isinstance(engine, SupportsWeightStream | SupportsLiveWeights)  # training-engine abilities


class _ChecksumOnly:
    def weight_checksum(self) -> float:
        return 0.0


def test_a_checksum_needs_its_uncounted_names() -> None:
    """An engine with ``weight_checksum()`` but no ``uncounted_names`` cannot be checked exactly (the worker
    would not know which weights the checksum leaves out): it is verified by the log-prob probe."""
    assert not isinstance(_ChecksumOnly(), SupportsWeightChecksum)


def test_the_dry_run_reports_a_step_extension_error(registered: Any) -> None:
    """The step extensions are part of the bundle: a plugin whose ``step_extensions`` hook fails is reported
    by ``rlcore run --dry-run``, with the config's other problems, before anything starts."""
    from click.testing import CliRunner

    import rlcore
    from rlcore.api import StepExtension
    from rlcore.cli import cli

    def step_extensions(config: Any) -> list[StepExtension]:
        return [StepExtension("twice"), StepExtension("twice")]

    hooks = types.SimpleNamespace(step_extensions=rlcore.hookimpl(step_extensions))
    with registered(hooks, name="extension-hook"):
        result = CliRunner().invoke(cli, ["run", "--dry-run", "algorithm.adv_estimator=nope"])
    assert result.exit_code == 2, result.output
    assert "algorithm.adv_estimator=nope: unknown advantage_estimator" in result.output
    assert "a step extension named 'twice'" in result.output and "Traceback" not in result.output
