"""Plugin discovery with real installed distributions.

Four throwaway plugin projects are written to a temporary directory, built and installed with pip into a
target folder, and every check runs ``rlcore`` in a subprocess that sees that folder on ``PYTHONPATH`` —
entry points are discovered by ``importlib.metadata`` exactly as for a user's ``pip install``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

GOOD_HOOKS = """
import click
import rlcore

@rlcore.hookimpl
def register_advantage_estimators(register):
    register("demo-est", "demo_good.heavy:estimate", description="demo estimator", aliases=("demo-alias",),
             needs_critic=False)
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

PLUGINS = {
    "rlcore-demo-good": ("demo_good", "1.2.3", {"hooks.py": GOOD_HOOKS, "heavy.py": HEAVY}),
    "rlcore-demo-clash": (
        "demo_clash",
        "0.0.1",
        {"hooks.py": CLASH_HOOKS, "est.py": "def estimate(**kw):\n    return None\n"},
    ),
    "rlcore-demo-broken": ("demo_broken", "0.0.1", {"hooks.py": BROKEN_HOOKS}),
    "rlcore-demo-typo": ("demo_typo", "0.0.1", {"hooks.py": TYPO_HOOKS}),
}


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory: pytest.TempPathFactory, throwaway_plugins) -> Path:
    """Build and pip-install the throwaway plugins into a target folder; return the folder."""
    return throwaway_plugins(tmp_path_factory.mktemp("plugin-src"), tmp_path_factory.mktemp("plugin-site"), PLUGINS)


def rlcore(site: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m rlcore ARGS`` with the plugin folder on the path."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("RLCORE_")}
    full_env["PYTHONPATH"] = str(site)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "rlcore", *args], capture_output=True, text=True, env=full_env, timeout=120
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
        assert set(row) == {"name", "version", "status", "builtin", "hooks", "components", "error"}
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
    result = rlcore(plugin_site, "plugins", "--all", "--json", env={"RLCORE_DISABLE_PLUGINS": "rlcore.builtin.rollout"})
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert rows["rlcore.builtin.rollout"]["status"] == "disabled"
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
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLCORE_")}
    env["PYTHONPATH"] = str(plugin_site)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
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
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLCORE_")}
    env["PYTHONPATH"] = str(plugin_site)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
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
