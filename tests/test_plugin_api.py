"""The versioned plugin API, in process: a plugin's declared ``RLCORE_API`` range is checked when it is
registered (``tests/test_plugins_installed.py`` does the same with real installed distributions)."""

from __future__ import annotations

import importlib
import json
import types
from pathlib import Path

import pytest
from click.testing import CliRunner
from packaging.specifiers import SpecifierSet
from packaging.version import Version

import rlcore
from rlcore.api import API_RANGE_ATTRIBUTE, API_VERSION
from rlcore.cli import cli
from rlcore.plugins import PluginLoadError, api_range_problem

ROOT = Path(__file__).resolve().parents[1]


def plugin_module(api_range: object = None) -> types.ModuleType:
    """A plugin module registering the preset ``api-demo``, declaring ``api_range`` unless it is None."""
    module = types.ModuleType("api_demo_hooks")

    @rlcore.hookimpl
    def register_presets(register):
        register("api-demo", {"trainer.total_epochs": 2})

    module.register_presets = register_presets  # type: ignore[attr-defined]
    if api_range is not None:
        setattr(module, API_RANGE_ATTRIBUTE, api_range)
    return module


def test_api_version_is_semver() -> None:
    """``API_VERSION`` is a plain ``major.minor.patch`` release."""
    assert str(Version(API_VERSION)) == API_VERSION and len(Version(API_VERSION).release) == 3


def test_compatible_range_registers(registered) -> None:
    """A range that contains the API version loads as before and is recorded."""
    major = Version(API_VERSION).major
    with registered(plugin_module(f">={major},<{major + 1}"), name="api-demo") as manager:
        record = manager.records["api-demo"]
        assert (record.status, record.api_range) == ("ok", f">={major},<{major + 1}")
        assert manager.registry.get("preset", "api-demo").plugin == "api-demo"
        assert record not in manager.undeclared_api()


def test_incompatible_range_is_refused(registered) -> None:
    """A range without the API version: ``incompatible``, nothing registered, a problem, fatal in strict mode."""
    with registered(plugin_module(">=999"), name="api-demo") as manager:
        record = manager.records["api-demo"]
        assert record.status == "incompatible"
        assert "plugin api-demo supports rlcore plugin API >=999, but this rlcore" in record.error
        assert f"has plugin API {API_VERSION}: it is not loaded" in record.error
        assert "api-demo" not in {c.name for c in manager.registry.components()}
        assert record in manager.problems()
        with pytest.raises(PluginLoadError, match=r"api-demo \[incompatible\]: plugin api-demo supports"):
            manager.check_strict()
        listed = CliRunner().invoke(cli, ["plugins", "--json", "--strict"])
        assert listed.exit_code == 1
        (row,) = [row for row in json.loads(listed.stdout) if row["name"] == "api-demo"]
        assert (row["status"], row["api"]) == ("incompatible", ">=999")


@pytest.mark.parametrize(
    ("declared", "problem"),
    [("1.x", "which is not a PEP 440 version range"), ("  ", "which is empty"), (1, "which is a int, not")],
)
def test_malformed_range_is_an_error_naming_the_plugin(registered, declared: object, problem: str) -> None:
    """A value that is no PEP 440 specifier is an ``error`` naming the plugin and the value."""
    with registered(plugin_module(declared), name="api-demo") as manager:
        record = manager.records["api-demo"]
        assert record.status == "error"
        assert record.error.startswith(f"plugin api-demo declares RLCORE_API = {declared!r}, {problem}")
        assert "api-demo" not in {c.name for c in manager.registry.components()}


def test_undeclared_range_loads_and_is_listed_for_a_warning(registered) -> None:
    """No declaration: loaded (third-party plugins written before the API had a version keep working), and
    named by :meth:`~rlcore.plugins.PluginManager.undeclared_api` for ``rlcore plugins`` to warn about."""
    with registered(plugin_module(), name="api-demo") as manager:
        record = manager.records["api-demo"]
        assert (record.status, record.api_range) == ("ok", None)
        assert record in manager.undeclared_api()
        assert manager.registry.get("preset", "api-demo")


@pytest.mark.parametrize("hooks", sorted(ROOT.glob("plugins/*/src/*/hooks.py")), ids=lambda p: p.parts[-4])
def test_every_bundled_plugin_declares_a_range_with_this_api(hooks: Path) -> None:
    """Each bundled plugin's hooks module declares ``RLCORE_API``, and its range contains ``API_VERSION``."""
    module = importlib.import_module(f"{hooks.parent.name}.hooks")
    declared = getattr(module, API_RANGE_ATTRIBUTE, None)
    assert declared is not None, f"{hooks} declares no {API_RANGE_ATTRIBUTE}"
    assert api_range_problem(declared) is None and SpecifierSet(declared).contains(API_VERSION), declared
