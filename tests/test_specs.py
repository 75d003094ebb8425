"""Capability specs (:mod:`rlcore.api.specs`): registering with one, the errors for a wrong one and for the
1.x ``**meta`` keywords, and the validation of every field."""

from __future__ import annotations

import types

import pytest

import rlcore
from rlcore.api.kinds import COMPONENT_KINDS
from rlcore.api.specs import (
    AdvantageEstimatorSpec,
    PresetSpec,
    RewardScorerSpec,
    SpecError,
    TrainingBackendSpec,
)
from rlcore.errors import RLCoreError
from rlcore.plugins import PluginRecord, make_plugin_manager
from rlcore.registry import Component, RegistrationError, Registry


def _register(kind: str, *args, **kwargs) -> Component:
    """Call the ``register`` callback of ``kind`` as the plugin ``test-plugin`` does and return the component."""
    registry = Registry()
    registry.make_register(kind, "test-plugin", None, None)(*args, **kwargs)
    return registry.get(kind, args[0])


def test_a_spec_is_kept_on_the_component() -> None:
    spec = AdvantageEstimatorSpec(needs_critic=True, min_group_size=2, batch_keys=frozenset({"acc"}))
    comp = _register("advantage_estimator", "est", "json:dumps", spec=spec)
    assert comp.spec is spec
    assert comp.spec.needs_critic and comp.spec.min_group_size == 2 and comp.spec.batch_keys == {"acc"}


@pytest.mark.parametrize("kind", [k for k in COMPONENT_KINDS if k.spec is not None], ids=lambda k: k.name)
def test_without_a_spec_the_kind_default_applies(kind) -> None:
    """Every capability is off: the default spec equals a spec built with no arguments."""
    assert _register(kind.name, "c", "json:dumps").spec == kind.spec()


@pytest.mark.parametrize("kind", [k for k in COMPONENT_KINDS if k.spec is None], ids=lambda k: k.name)
def test_a_kind_without_capabilities_has_no_spec_and_takes_none(kind) -> None:
    assert _register(kind.name, "c", "json:dumps").spec is None
    with pytest.raises(
        RegistrationError, match=f"test-plugin: {kind.name} 'c': the {kind.name} kind has no capabilities"
    ):
        _register(kind.name, "c", "json:dumps", spec=PresetSpec())


def test_a_spec_of_another_kind_names_plugin_kind_component_and_class() -> None:
    with pytest.raises(RegistrationError) as info:
        _register("advantage_estimator", "est", "json:dumps", spec=TrainingBackendSpec(sum_pi_squared=True))
    assert str(info.value) == (
        "test-plugin: advantage_estimator 'est': spec must be a rlcore.api.specs.AdvantageEstimatorSpec, "
        "got TrainingBackendSpec"
    )
    with pytest.raises(RegistrationError, match="spec must be a rlcore.api.specs.PresetSpec, got dict"):
        _register("preset", "p", {"trainer.total_epochs": 1}, spec={"task": "x"})


def test_an_old_meta_keyword_says_what_to_write_instead() -> None:
    with pytest.raises(RegistrationError) as info:
        _register("advantage_estimator", "gae", "json:dumps", needs_critic=True, min_group_size=2)
    message = str(info.value)
    assert "\n" not in message
    assert message == (
        "test-plugin: advantage_estimator 'gae': capabilities are no longer keywords of register(); write "
        "spec=AdvantageEstimatorSpec(needs_critic=True, min_group_size=2) "
        "(from rlcore.api.specs import AdvantageEstimatorSpec)"
    )
    with pytest.raises(RegistrationError, match=r"write spec=PresetSpec\(task='arith'\)"):
        _register("preset", "p", {}, task="arith")


def test_an_unknown_keyword_lists_what_register_takes() -> None:
    with pytest.raises(RegistrationError) as info:
        _register("advantage_estimator", "est", "json:dumps", needs_critic=True, install_hint="pip install x")
    assert str(info.value) == (
        "test-plugin: advantage_estimator 'est': register() got unexpected keyword(s) install_hint, needs_critic; "
        "it takes description, aliases, replace, spec (a AdvantageEstimatorSpec)"
    )
    with pytest.raises(
        RegistrationError, match="got unexpected keyword.s. extra; it takes description, aliases, replace$"
    ):
        _register("policy_loss", "loss", "json:dumps", extra="gpu")


def test_an_old_keyword_in_a_plugin_marks_it_error_with_the_fix() -> None:
    """Through the plugin loader: the plugin is ``error``, its record carries the one-line fix, and it
    contributes nothing."""

    def register_advantage_estimators(register):
        register("old-style", "json:dumps", needs_critic=True)

    manager = make_plugin_manager()
    module = types.SimpleNamespace(
        RLCORE_API=">=3,<4", register_advantage_estimators=rlcore.hookimpl(register_advantage_estimators)
    )
    manager.records["old-plugin"] = PluginRecord(name="old-plugin", version=None, builtin=False)
    manager._register(module, manager.records["old-plugin"])
    manager.build_registry()
    record = manager.records["old-plugin"]
    assert record.status == "error", record
    assert "write spec=AdvantageEstimatorSpec(needs_critic=True)" in record.error
    assert not manager.registry.has("advantage_estimator", "old-style")


def test_registry_spec_is_read_without_importing_the_target() -> None:
    registry = Registry()
    registry.make_register("reward_scorer", "p", None, None)(
        "src", "no_such_module_anywhere:score", spec=RewardScorerSpec(ground_truth="text", sandbox=True)
    )
    assert registry.spec("reward_scorer", "src") == RewardScorerSpec(ground_truth="text", sandbox=True)
    with pytest.raises(RLCoreError, match="the dataset kind has no capabilities; kinds with a spec are"):
        registry.spec("dataset", "src")


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: AdvantageEstimatorSpec(min_group_size=0), "AdvantageEstimatorSpec.min_group_size must be >= 1, got 0"),
        (lambda: AdvantageEstimatorSpec(min_group_size=2.0), "AdvantageEstimatorSpec.min_group_size must be an int"),
        (lambda: AdvantageEstimatorSpec(min_group_size=True), "AdvantageEstimatorSpec.min_group_size must be an int"),
        (
            lambda: AdvantageEstimatorSpec(needs_critic="yes"),
            "AdvantageEstimatorSpec.needs_critic must be True or False",
        ),
        (
            lambda: AdvantageEstimatorSpec(needs_greedy_baseline=1),
            "AdvantageEstimatorSpec.needs_greedy_baseline must be",
        ),
        (lambda: AdvantageEstimatorSpec(batch_keys="acc"), "AdvantageEstimatorSpec.batch_keys must be a set of column"),
        (
            lambda: AdvantageEstimatorSpec(optional_batch_keys={1}),
            "AdvantageEstimatorSpec.optional_batch_keys must hold",
        ),
        (
            lambda: AdvantageEstimatorSpec(batch_keys=frozenset({"acc"}), optional_batch_keys=frozenset({"acc"})),
            "acc in both batch_keys and optional_batch_keys",
        ),
        (
            lambda: AdvantageEstimatorSpec(reward_model_worker="pkg.Worker"),
            "reward_model_worker must be a 'module:attr'",
        ),
        (
            lambda: TrainingBackendSpec(data_parallel_size=4),
            "TrainingBackendSpec.data_parallel_size must be a function",
        ),
        (
            lambda: TrainingBackendSpec(sum_pi_squared="true"),
            "TrainingBackendSpec.sum_pi_squared must be True or False",
        ),
        (lambda: PresetSpec(prepare="pkg.prepare"), "PresetSpec.prepare must be a 'module:attr' string"),
        (lambda: PresetSpec(task=""), "PresetSpec.task must be a non-empty string"),
        (lambda: RewardScorerSpec(ground_truth="str"), "RewardScorerSpec.ground_truth must be 'as_stored' or 'text'"),
        (lambda: RewardScorerSpec(sandbox=None), "RewardScorerSpec.sandbox must be True or False"),
    ],
)
def test_invalid_fields_are_refused_naming_the_field(build, message: str) -> None:
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build()


def test_sets_are_normalised_and_specs_are_frozen() -> None:
    spec = AdvantageEstimatorSpec(batch_keys={"rm_scores", "acc"}, optional_batch_keys=["rollout_is_weights"])
    assert spec.batch_keys == frozenset({"rm_scores", "acc"}) and isinstance(spec.batch_keys, frozenset)
    assert spec.optional_batch_keys == frozenset({"rollout_is_weights"})
    with pytest.raises(AttributeError):
        spec.needs_critic = True  # type: ignore[misc]
