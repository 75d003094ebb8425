"""The component registry and the loader's in-process behaviour."""

from __future__ import annotations

import tomllib
import types
from pathlib import Path

import click
import pytest
from rlcore_testkit.runs import dry_run

import rlcore
from rlcore import distributions
from rlcore.distributions import Distribution
from rlcore.plugins import normalize_dist_name
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


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (_comp("arith", plugin="p1"), _comp("mine", plugin="p2", aliases=("arith",))),
        (_comp("a", plugin="p1", aliases=("shared",)), _comp("b", plugin="p2", aliases=("shared",))),
    ],
    ids=["alias-equals-a-name", "alias-equals-an-alias"],
)
def test_an_alias_clash_is_a_conflict_naming_both_unless_replaced(first: Component, second: Component) -> None:
    registry = Registry()
    registry.add(first)
    registry.add(second)
    with pytest.raises(ComponentConflictError, match=rf"policy_loss '{first.name}' is registered by both p1 and p2"):
        registry.get("policy_loss", second.aliases[0])
    assert not registry.has("policy_loss", second.name), "the second component is not added"

    replaced = Registry()
    replaced.add(first)
    replaced.add(second, replace=True)
    comp = replaced.get("policy_loss", second.aliases[0])
    assert (comp.plugin, comp.replaced) == ("p2", "p1") and not replaced.conflicts
    for label in (first.name, *first.aliases):  # the replaced component is gone, its names taken or free
        assert not replaced.has("policy_loss", label) or replaced.get("policy_loss", label).plugin == "p2"


def test_a_plugin_alias_cannot_take_over_the_bundled_tasks_scorer(registered) -> None:
    """A plugin registering a scorer with the alias ``rlcore/arith`` (the bundled task's name): both plugins
    are marked ``conflict`` naming the (kind, name), and using the name is the conflict error naming both;
    with ``replace=True`` the plugin takes it over."""
    for replace in (False, True):
        plugin = types.SimpleNamespace()

        @rlcore.hookimpl
        def register_reward_scorers(register, replace=replace):
            register("my/arith", "json:dumps", aliases=("rlcore/arith",), replace=replace)

        plugin.register_reward_scorers = register_reward_scorers
        with registered(plugin, name="alias-plugin") as manager:
            if not replace:
                with pytest.raises(ComponentConflictError) as caught:
                    manager.registry.get("reward_scorer", "rlcore/arith")
                assert str(caught.value).startswith(
                    "reward_scorer 'rlcore/arith' is registered by both rlcore-plugin-tasks and alias-plugin"
                )
                assert manager.records["alias-plugin"].status == "conflict"
                assert manager.records["alias-plugin"].error == (
                    "reward_scorer 'rlcore/arith' is also registered by rlcore-plugin-tasks"
                )
            else:
                comp = manager.registry.get("reward_scorer", "rlcore/arith")
                assert (comp.name, comp.plugin, comp.replaced) == ("my/arith", "alias-plugin", "rlcore-plugin-tasks")
                assert manager.records["alias-plugin"].status == "ok"


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
    registry.add(
        _comp(
            "vllm",
            kind="rollout_engine",
            plugin="rlcore-plugin-vllm",
            target="engine_pkg_x:Engine",
        )
    )
    with pytest.raises(ComponentImportError) as info:
        registry.load("rollout_engine", "vllm")
    message = str(info.value)
    assert "needs the module 'surely_missing_dependency'" in message
    assert "pip install 'rlcore-plugin-vllm[cpu]' (CPU machines) or pip install 'rlcore-plugin-vllm[gpu]'" in message


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
    assert {"rlcore.builtin.data", "rlcore.builtin.rewards"} <= builtin
    assert plugin_manager.registry.get("reward_manager", "naive").plugin == "rlcore.builtin.rewards"


ABSENT = "rlcore-plugin-surely-absent"


@pytest.fixture
def table(monkeypatch: pytest.MonkeyPatch) -> None:
    """A component -> distribution table with one distribution that is not installed and one that is."""
    monkeypatch.setattr(
        distributions,
        "DISTRIBUTIONS",
        (
            Distribution(ABSENT, {"training_backend": ("absent", "absent2")}),
            Distribution("rlcore", {"training_backend": ("present",)}),
        ),
    )


def test_a_missing_command_names_the_distribution_that_adds_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sub-command that a distribution of the table adds: its ``pip install`` line when the distribution is
    not installed, ``rlcore plugins`` when it is; an unknown command gets no advice."""
    monkeypatch.setattr(
        distributions,
        "DISTRIBUTIONS",
        (Distribution(ABSENT, {}, commands=("absent", "data absent")), Distribution("rlcore", {}, commands=("here",))),
    )
    assert distributions.missing_command_advice("data absent") == (
        f"`rlcore data absent` is added by {ABSENT}, which is not installed: pip install {ABSENT}"
    )
    assert distributions.missing_command_advice("here") == (
        "`rlcore here` is added by rlcore, which is installed but did not add it (disabled, failed to load, or an "
        "older version: see `rlcore plugins`)"
    )
    assert distributions.missing_command_advice("data no-such-set") is None


def test_unknown_name_of_a_missing_distribution_names_its_pip_line(table: None) -> None:
    registry = Registry()
    registry.add(_comp("fsdp", kind="training_backend"))
    with pytest.raises(UnknownComponentError) as info:
        registry.get("training_backend", "absent2")
    assert str(info.value) == (
        f"unknown training_backend 'absent2': it is provided by {ABSENT}, which is not "
        f"installed: pip install {ABSENT}. Known training_backends: fsdp"
    )


def test_unknown_name_of_an_installed_distribution_points_to_rlcore_plugins(table: None) -> None:
    with pytest.raises(UnknownComponentError, match=r"provided by rlcore, which is installed but did not register"):
        Registry().get("training_backend", "present")


def test_did_you_mean_a_component_of_a_missing_distribution(table: None) -> None:
    with pytest.raises(UnknownComponentError, match=rf"Did you mean 'absent' \(pip install {ABSENT}\)\?"):
        Registry().get("training_backend", "absnet")


@pytest.mark.parametrize(
    ("key", "value", "feature"),
    [
        ("actor_rollout_ref.actor.strategy", "veomni", "verl's VeOmni engine"),
        ("actor_rollout_ref.rollout.name", "trtllm", "TensorRT-LLM rollout (rollout.name=trtllm)"),
    ],
)
def test_a_verl_engine_rlcore_lacks_is_named_as_a_missing_feature(key: str, value: str, feature: str) -> None:
    """verl's engines that no rlcore distribution provides are named as missing features, not as a typo."""
    result = dry_run(f"{key}={value}")
    assert result.exit_code == 2, result.output
    assert f"{key}={value}: " in result.output
    assert f"{feature} is not supported by rlcore yet" in result.output
    assert "Did you mean" not in result.output


def test_install_line_names_every_extra() -> None:
    vllm = distributions.by_name("rlcore-plugin-vllm")
    assert vllm is not None and set(vllm.extras) == {"cpu", "gpu"}
    for extra, machines in vllm.extras.items():
        assert f"pip install 'rlcore-plugin-vllm[{extra}]' ({machines})" in vllm.install_line


def test_missing_dependency_of_a_distribution_with_extras_names_its_install_line(tmp_path, monkeypatch) -> None:
    (tmp_path / "engine_pkg_y.py").write_text("import surely_missing_engine_library\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = Registry()
    registry.add(_comp("vllm", kind="rollout_engine", plugin="rlcore-plugin-vllm", target="engine_pkg_y:Engine"))
    with pytest.raises(ComponentImportError) as info:
        registry.load("rollout_engine", "vllm")
    assert distributions.by_name("rlcore-plugin-vllm").install_line in str(info.value)


def test_table_agrees_with_what_the_bundled_plugins_register(plugin_manager) -> None:
    """Every distribution of ``plugins/`` has a row in :data:`rlcore.distributions.DISTRIBUTIONS` listing exactly
    the names and aliases its plugin registers; no row names a built-in component or a name twice."""
    root = Path(__file__).resolve().parents[1]
    registered: dict[str, set[tuple[str, str]]] = {}
    for comp in plugin_manager.registry.components():
        names = {(comp.kind, name) for name in (comp.name, *comp.aliases)}
        registered.setdefault(normalize_dist_name(comp.dist or comp.plugin), set()).update(names)
    for pyproject in sorted(root.glob("plugins/*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text())["project"]
        if "rlcore" not in project["entry-points"]:
            continue  # the test kit: a test-only distribution, no plugin
        dist = normalize_dist_name(project["name"])
        record = plugin_manager.records.get(dist)
        assert record is not None and record.status == "ok", f"{dist} is not loaded: pip install -r requirements.txt"
        row = distributions.by_name(dist)
        assert row is not None, f"{dist} has no row in rlcore.distributions.DISTRIBUTIONS"
        assert {(kind, name) for kind, names in row.components.items() for name in names} == registered.get(dist, set())
    table = [
        (kind, name) for row in distributions.DISTRIBUTIONS for kind, names in row.components.items() for name in names
    ]
    assert len(table) == len(set(table))
    builtin = {key for plugin, names in registered.items() if plugin.startswith("rlcore.builtin") for key in names}
    assert not builtin & set(table)


def command_paths(group: click.Group, prefix: str = "") -> set[str]:
    """Every sub-command of ``group``, as typed after ``rlcore`` (``"data arith-sft"``)."""
    paths = set()
    for name, command in group.commands.items():
        paths.add(f"{prefix}{name}")
        if isinstance(command, click.Group):
            paths |= command_paths(command, f"{prefix}{name} ")
    return paths


def test_the_commands_of_each_row_are_what_its_plugin_adds(plugin_manager) -> None:
    """A row's ``commands`` are exactly the sub-commands its plugin's ``register_commands`` adds to ``rlcore``
    (given the core's ``data`` group to add to), and every row that lists commands belongs to such a plugin."""
    hooks = plugin_manager.pm.hook.register_commands.get_hookimpls()
    for impl in hooks:
        group = click.Group("rlcore", commands={"data": click.Group("data")})
        impl.function(cli=group)
        row = distributions.by_name(impl.plugin_name)
        assert row is not None, f"{impl.plugin_name} adds commands but has no row"
        assert command_paths(group) - {"data"} == set(row.commands), impl.plugin_name
    listing = {row.name for row in distributions.DISTRIBUTIONS if row.commands}
    assert listing <= {impl.plugin_name for impl in hooks}
