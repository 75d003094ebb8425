"""Plugin discovery with real installed distributions.

Six throwaway plugin projects are written to a temporary directory, built and installed with pip into a
target folder, and every check runs ``rlcore`` in a subprocess that sees that folder on ``PYTHONPATH`` (in
front of this process's own ``PYTHONPATH``, so a worktree's sources stay the ones tested) — entry points are
discovered by ``importlib.metadata`` exactly as for a user's ``pip install``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from rlcore.api import API_VERSION

GOOD_HOOKS = """
import click
import rlcore
from rlcore.api.specs import AdvantageEstimatorSpec

@rlcore.hookimpl
def register_advantage_estimators(register):
    register("demo-est", "demo_good.heavy:estimate", description="demo estimator", aliases=("demo-alias",),
             spec=AdvantageEstimatorSpec(needs_critic=False))
    register("demo-missing", "demo_good.not_there:estimate", description="target whose module is missing")

@rlcore.hookimpl
def register_presets(register):
    register("demo-preset", {"trainer.total_epochs": 7}, description="seven epochs")

@rlcore.hookimpl
def config_defaults():
    return {"demo": {"threshold": 0.5}}

@rlcore.hookimpl
def register_commands(cli):
    @cli.command(name="demo-hello")
    def demo_hello():
        "Say hello from the demo plugin."
        click.echo("hello from demo")
"""

HEAVY = """
import torch

def estimate(**kwargs):
    return torch.zeros(1), torch.zeros(1)
"""

CLASH_HOOKS = """
import rlcore

@rlcore.hookimpl
def register_advantage_estimators(register):
    register("demo-est", "demo_clash.est:estimate", description="clashes with rlcore-demo-good")
    register("demo-other", "demo_clash.est:estimate", description="no clash")
"""

BROKEN_HOOKS = """
raise RuntimeError("this plugin is broken on purpose")
"""

TYPO_HOOKS = """
import rlcore

@rlcore.hookimpl
def register_advantage_estimator(register):
    register("typo", "demo_typo.x:y")
"""

FUTURE_HOOKS = """
import rlcore

RLCORE_API = ">=99,<100"

@rlcore.hookimpl
def register_presets(register):
    register("demo-future", {"trainer.total_epochs": 3})
"""

BAD_RANGE_HOOKS = """
import rlcore

RLCORE_API = "1.x"

@rlcore.hookimpl
def register_presets(register):
    register("demo-bad-range", {"trainer.total_epochs": 3})
"""

PLUGINS = {
    "rlcore-demo-good": ("demo_good", "1.2.3", {"hooks.py": GOOD_HOOKS, "heavy.py": HEAVY}),
    "rlcore-demo-clash": (
        "demo_clash",
        "0.0.1",
        {"hooks.py": CLASH_HOOKS, "est.py": "def estimate(**kw):\n    return None\n"},
    ),
    "rlcore-demo-broken": ("demo_broken", "0.0.1", {"hooks.py": BROKEN_HOOKS}),
    "rlcore-demo-typo": ("demo_typo", "0.0.1", {"hooks.py": TYPO_HOOKS}),
    "rlcore-demo-future": ("demo_future", "2.0.0", {"hooks.py": FUTURE_HOOKS}),
    "rlcore-demo-bad-range": ("demo_bad_range", "0.0.1", {"hooks.py": BAD_RANGE_HOOKS}),
}


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory: pytest.TempPathFactory, throwaway_plugins) -> Path:
    """Build and pip-install the throwaway plugins into a target folder; return the folder."""
    return throwaway_plugins(tmp_path_factory.mktemp("plugin-src"), tmp_path_factory.mktemp("plugin-site"), PLUGINS)


def site_env(site: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without ``RLCORE_*`` variables, the plugin folder first on ``PYTHONPATH``, and ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLCORE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    return {**env, **(extra or {})}


def rlcore(site: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m rlcore ARGS`` with the plugin folder on the path."""
    return subprocess.run(
        [sys.executable, "-m", "rlcore", *args], capture_output=True, text=True, env=site_env(site, env), timeout=120
    )


def listing(site: Path, env: dict[str, str] | None = None) -> dict[str, dict]:
    """``rlcore plugins --json`` as ``{name: row}``."""
    result = rlcore(site, "plugins", "--json", env=env)
    assert result.returncode == 0, result.stderr
    return {row["name"]: row for row in json.loads(result.stdout)}


def test_discovery_lists_installed_plugin_with_components(plugin_site: Path) -> None:
    rows = listing(plugin_site, {"RLCORE_DISABLE_PLUGINS": "rlcore-demo-clash"})
    good = rows["rlcore-demo-good"]
    assert good["status"] == "ok"
    assert good["version"] == "1.2.3"
    assert good["builtin"] is False
    assert good["hooks"] == [
        "config_defaults",
        "register_advantage_estimators",
        "register_commands",
        "register_presets",
    ]
    est = next(c for c in good["components"] if c["name"] == "demo-est")
    assert est == {
        "kind": "advantage_estimator",
        "name": "demo-est",
        "target": "demo_good.heavy:estimate",
        "description": "demo estimator",
        "aliases": ["demo-alias"],
    }


def test_json_shape(plugin_site: Path) -> None:
    for row in listing(plugin_site).values():
        assert set(row) == {"name", "version", "status", "api", "builtin", "hooks", "components", "error"}
        for comp in row["components"]:
            assert {"kind", "name", "target", "description", "aliases"} <= set(comp)


def test_broken_plugin_is_isolated(plugin_site: Path) -> None:
    rows = listing(plugin_site)
    assert rows["rlcore-demo-broken"]["status"] == "error"
    assert "broken on purpose" in rows["rlcore-demo-broken"]["error"]
    assert rows["rlcore-demo-typo"]["status"] == "error"
    assert rows["rlcore-demo-clash"]["components"], "the other plugins keep their components"
    table = rlcore(plugin_site, "plugins")
    assert table.returncode == 0
    assert "rlcore-demo-broken" in table.stdout and "error" in table.stdout
    verbose = rlcore(plugin_site, "plugins", "--verbose")
    assert "Traceback" in verbose.stdout and "RuntimeError" in verbose.stdout


def test_unknown_hook_is_an_error(plugin_site: Path) -> None:
    row = listing(plugin_site)["rlcore-demo-typo"]
    assert row["status"] == "error"
    assert "register_advantage_estimator" in row["error"] and "register_advantage_estimators" in row["error"]


def test_duplicate_component_is_a_conflict_naming_both(plugin_site: Path) -> None:
    rows = listing(plugin_site)
    assert rows["rlcore-demo-clash"]["status"] == "conflict"
    assert "advantage_estimator 'demo-est'" in rows["rlcore-demo-clash"]["error"]
    assert "rlcore-demo-good" in rows["rlcore-demo-clash"]["error"]
    assert rows["rlcore-demo-good"]["status"] == "conflict"
    assert "rlcore-demo-clash" in rows["rlcore-demo-good"]["error"]
    result = rlcore(plugin_site, "run", "--dry-run", "algorithm.adv_estimator=demo-est")
    assert result.returncode == 2
    assert "is registered by both rlcore-demo-clash and rlcore-demo-good" in result.stderr
    assert "Traceback" not in result.stderr


def test_allow_list(plugin_site: Path) -> None:
    rows = listing(plugin_site, {"RLCORE_LOAD_PLUGINS": "rlcore-demo-good"})
    assert rows["rlcore-demo-good"]["status"] == "ok"
    assert rows["rlcore-demo-clash"]["status"] == "disabled"
    assert rows["rlcore-demo-broken"]["status"] == "disabled"
    none = listing(plugin_site, {"RLCORE_LOAD_PLUGINS": ""})
    assert {row["status"] for name, row in none.items() if name.startswith("rlcore-demo")} == {"disabled"}


def test_deny_list(plugin_site: Path) -> None:
    rows = listing(plugin_site, {"RLCORE_DISABLE_PLUGINS": "rlcore_demo_broken, rlcore-demo-clash"})
    assert rows["rlcore-demo-broken"]["status"] == "disabled"
    assert rows["rlcore-demo-clash"]["status"] == "disabled"
    assert rows["rlcore-demo-good"]["status"] == "ok"


def test_builtins_can_be_disabled(plugin_site: Path) -> None:
    result = rlcore(plugin_site, "plugins", "--all", "--json", env={"RLCORE_DISABLE_PLUGINS": "rlcore.builtin.rewards"})
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert rows["rlcore.builtin.rewards"]["status"] == "disabled"
    assert rows["rlcore.builtin.data"]["status"] == "ok"


def test_strict_mode(plugin_site: Path) -> None:
    flag = rlcore(plugin_site, "plugins", "--strict")
    assert flag.returncode == 1
    env = rlcore(plugin_site, "plugins", env={"RLCORE_STRICT_PLUGINS": "1"})
    assert env.returncode == 1
    assert "rlcore-demo-broken [error]" in env.stderr and "rlcore-demo-clash [conflict]" in env.stderr
    assert "Traceback" not in env.stderr
    clean = rlcore(
        plugin_site, "plugins", env={"RLCORE_STRICT_PLUGINS": "1", "RLCORE_LOAD_PLUGINS": "rlcore-demo-good"}
    )
    assert clean.returncode == 0, clean.stderr


def test_did_you_mean(plugin_site: Path) -> None:
    result = rlcore(
        plugin_site,
        "run",
        "--dry-run",
        "algorithm.adv_estimator=demo-ets",
        env={"RLCORE_DISABLE_PLUGINS": "rlcore-demo-clash"},
    )
    assert result.returncode == 2
    assert "unknown advantage_estimator 'demo-ets'. Did you mean 'demo-est'?" in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_target_module_names_the_distribution(plugin_site: Path) -> None:
    code = "from rlcore.plugins import get_component\nget_component('advantage_estimator', 'demo-missing')"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=site_env(plugin_site), timeout=60
    )
    assert result.returncode == 1
    assert "ComponentImportError" in result.stderr and "rlcore-demo-good" in result.stderr
    assert "demo_good.not_there" in result.stderr


def test_listing_never_imports_torch(plugin_site: Path) -> None:
    code = (
        "import sys\n"
        "from rlcore.cli import main\n"
        "sys.argv = ['rlcore', 'plugins', '--all', '--json']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'ray', 'vllm', 'demo_good.heavy') if m in sys.modules)\n"
        "print('HEAVY=' + ','.join(heavy))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=site_env(plugin_site), timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("HEAVY=")


def test_plugin_command_preset_and_config_section(plugin_site: Path) -> None:
    hello = rlcore(plugin_site, "demo-hello")
    assert hello.returncode == 0 and hello.stdout.strip() == "hello from demo"
    assert "demo-hello" in rlcore(plugin_site, "--help").stdout
    shown = rlcore(plugin_site, "config", "show", "--preset", "demo-preset", "demo.threshold=0.9")
    assert shown.returncode == 0, shown.stderr
    assert "threshold: 0.9" in shown.stdout and "total_epochs: 7" in shown.stdout
    presets = json.loads(rlcore(plugin_site, "plugins", "--json", "--kind", "preset").stdout)
    assert "rlcore-demo-good" in [row["name"] for row in presets]
    assert all(row["components"] and {c["kind"] for c in row["components"]} == {"preset"} for row in presets)


def test_incompatible_api_range_is_refused(plugin_site: Path) -> None:
    """A distribution whose ``RLCORE_API`` excludes this rlcore's plugin API is not loaded: ``incompatible`` in
    the table and the JSON (with its declared range), its preset unknown, fatal with ``--strict``."""
    table = rlcore(plugin_site, "plugins")
    assert table.returncode == 0, table.stderr
    (line,) = [line for line in table.stdout.splitlines() if line.startswith("rlcore-demo-future ")]
    assert line.split()[1:3] == ["2.0.0", "incompatible"]
    message = f"plugin rlcore-demo-future supports rlcore plugin API >=99,<100, but this rlcore ({metadata.version('rlcore')}) "
    assert f"{message}has plugin API {API_VERSION}: it is not loaded" in line
    row = listing(plugin_site)["rlcore-demo-future"]
    assert (row["status"], row["api"], row["components"], row["hooks"]) == ("incompatible", ">=99,<100", [], [])
    strict = rlcore(plugin_site, "plugins", "--strict", env={"RLCORE_LOAD_PLUGINS": "rlcore-demo-future"})
    assert strict.returncode == 1
    assert "rlcore-demo-future" in strict.stdout and "incompatible" in strict.stdout
    fatal = rlcore(
        plugin_site, "plugins", env={"RLCORE_STRICT_PLUGINS": "1", "RLCORE_LOAD_PLUGINS": "rlcore-demo-future"}
    )
    assert fatal.returncode == 1
    assert (
        "rlcore-demo-future [incompatible]: plugin rlcore-demo-future supports rlcore plugin API >=99,<100"
        in fatal.stderr
    )
    assert "Traceback" not in fatal.stderr
    run = rlcore(plugin_site, "config", "show", "--preset", "demo-future")
    assert run.returncode == 2 and "unknown preset 'demo-future'" in run.stderr


def test_malformed_api_range_is_an_error_naming_the_plugin(plugin_site: Path) -> None:
    """``RLCORE_API = "1.x"`` is an ``error`` whose message names the plugin, the value and the expected form."""
    row = listing(plugin_site)["rlcore-demo-bad-range"]
    assert (row["status"], row["api"], row["components"]) == ("error", "1.x", [])
    assert row["error"].startswith("plugin rlcore-demo-bad-range declares RLCORE_API = '1.x', which is not a PEP 440")


def test_undeclared_api_range_loads_with_a_warning(plugin_site: Path) -> None:
    """A plugin that declares no range is loaded (``api`` null) and ``rlcore plugins`` warns about it once."""
    only_good = {"RLCORE_LOAD_PLUGINS": "rlcore-demo-good"}
    assert listing(plugin_site, only_good)["rlcore-demo-good"]["api"] is None
    result = rlcore(plugin_site, "plugins", env=only_good)
    warnings = [line for line in result.stderr.splitlines() if "declares no RLCORE_API range" in line]
    assert warnings == [
        f"warning: plugin rlcore-demo-good declares no RLCORE_API range, so rlcore cannot tell whether it fits "
        f'plugin API {API_VERSION}; it is loaded anyway. Its author should add RLCORE_API = ">=3,<4" to demo_good.hooks'
    ]
