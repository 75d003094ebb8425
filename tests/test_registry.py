"""The component registry and the loader's in-process behaviour."""

from __future__ import annotations

import types

import pytest

import rlcore
from rlcore.registry import (
    Component,
    ComponentConflictError,
    ComponentImportError,
    RegistrationError,
    Registry,
    UnknownComponentError,
)


def _comp(name: str, plugin: str = "p", target: object = "json:dumps", kind: str = "policy_loss", **kw) -> Component:
    return Component(kind=kind, name=name, target=target, plugin=plugin, dist=plugin, **kw)


def test_lazy_target_is_imported_once_and_cached() -> None:
    registry = Registry()
    registry.add(_comp("x", target="json:dumps"))
    comp = registry.get("policy_loss", "x")
    import json

    assert comp.load() is json.dumps
    assert comp.load() is comp.load()


def test_aliases_resolve_to_the_same_component() -> None:
    registry = Registry()
    registry.add(_comp("fsdp", kind="training_backend", aliases=("fsdp2",)))
    assert registry.get("training_backend", "fsdp2").name == "fsdp"
    assert registry.has("training_backend", "fsdp2")
    assert registry.names("training_backend") == ["fsdp"]


def test_duplicate_is_a_conflict_naming_both() -> None:
    registry = Registry()
    registry.add(_comp("dapo", plugin="rlcore-plugin-dapo"))
    registry.add(_comp("dapo", plugin="rlcore-plugin-clash"))
    with pytest.raises(ComponentConflictError, match="rlcore-plugin-dapo and rlcore-plugin-clash"):
        registry.get("policy_loss", "dapo")


def test_replace_overrides_and_is_recorded() -> None:
    registry = Registry()
    registry.add(_comp("vanilla", plugin="rlcore.builtin.algorithms"))
    registry.add(_comp("vanilla", plugin="my-plugin", target="json:loads"), replace=True)
    comp = registry.get("policy_loss", "vanilla")
    assert comp.plugin == "my-plugin" and comp.replaced == "rlcore.builtin.algorithms"
    assert not registry.conflicts


def test_alias_clash_with_a_name_is_a_conflict() -> None:
    registry = Registry()
    registry.add(_comp("a", plugin="p1", aliases=("b",)))
    registry.add(_comp("b", plugin="p2"))
    with pytest.raises(ComponentConflictError):
        registry.get("policy_loss", "a")


def test_unknown_name_lists_known_names_and_suggests() -> None:
    registry = Registry()
    for name in ("grpo", "gae", "rloo"):
        registry.add(_comp(name, kind="advantage_estimator"))
    with pytest.raises(UnknownComponentError) as info:
        registry.get("advantage_estimator", "gpro")
    message = str(info.value)
    assert "Did you mean 'grpo'?" in message and "gae, grpo, rloo" in message


def test_unknown_kind() -> None:
    with pytest.raises(UnknownComponentError, match="unknown component kind 'estimator'"):
        Registry().get("estimator", "x")


@pytest.mark.parametrize(
    ("comp", "message"),
    [
        (_comp("bad name"), "invalid policy_loss name"),
        (_comp("x", target="no_colon_here"), "is not of the form 'module:attr'"),
        (_comp("x", kind="not_a_kind"), "unknown component kind"),
    ],
)
def test_registration_is_validated(comp: Component, message: str) -> None:
    with pytest.raises(RegistrationError, match=message):
        Registry().add(comp)


def test_missing_dependency_names_distribution_and_extra(tmp_path, monkeypatch) -> None:
    (tmp_path / "engine_pkg_x").mkdir()
    (tmp_path / "engine_pkg_x" / "__init__.py").write_text("import surely_missing_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = Registry()
    registry.add(_comp("vllm", kind="rollout_engine", plugin="rlcore-plugin-vllm",
                       target="engine_pkg_x:Engine", meta={"extra": "gpu"}))
    with pytest.raises(ComponentImportError) as info:
        registry.load("rollout_engine", "vllm")
    message = str(info.value)
    assert "needs the module 'surely_missing_dependency'" in message
    assert "pip install 'rlcore-plugin-vllm[gpu]'" in message


def test_missing_target_module_asks_whether_the_plugin_is_installed() -> None:
    registry = Registry()
    registry.add(_comp("x", target="surely_missing_module:Engine", plugin="rlcore-plugin-x"))
    with pytest.raises(ComponentImportError, match="Is rlcore-plugin-x installed"):
        registry.load("policy_loss", "x")


def test_broken_plugin_module_is_not_reported_as_missing(tmp_path, monkeypatch) -> None:
    (tmp_path / "broken_pkg_x.py").write_text("from json import no_such_name\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = Registry()
    registry.add(_comp("x", target="broken_pkg_x:thing", plugin="rlcore-plugin-x"))
    with pytest.raises(ComponentImportError, match="looks broken or incompatible"):
        registry.load("policy_loss", "x")


def test_missing_attribute() -> None:
    registry = Registry()
    registry.add(_comp("x", target="json:no_such_function"))
    with pytest.raises(ComponentImportError, match="has no attribute 'no_such_function'"):
        registry.load("policy_loss", "x")


def test_registration_hook_that_raises_contributes_nothing(registered) -> None:
    plugin = types.SimpleNamespace()

    @rlcore.hookimpl
    def register_policy_losses(register):
        register("half-registered", "json:dumps")
        raise ValueError("boom")

    plugin.register_policy_losses = register_policy_losses
    with registered(plugin, name="raiser") as manager:
        assert manager.records["raiser"].status == "error"
        assert "register_policy_losses raised ValueError: boom" in manager.records["raiser"].error
        assert not manager.registry.has("policy_loss", "half-registered")
        assert manager.registry.has("policy_loss", "vanilla")


def test_load_plugins_is_idempotent(plugin_manager) -> None:
    assert rlcore.load_plugins() is rlcore.load_plugins() is plugin_manager


def test_builtins_are_listed_as_plugins(plugin_manager) -> None:
    builtin = {name for name, record in plugin_manager.records.items() if record.builtin}
    assert {"rlcore.builtin.data", "rlcore.builtin.rollout", "rlcore.builtin.rewards"} <= builtin
    assert plugin_manager.registry.get("rollout_engine", "hf").plugin == "rlcore.builtin.rollout"
