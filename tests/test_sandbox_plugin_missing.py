"""The core without rlcore-plugin-sandbox (disabled here): what asks for the sandbox's code scorer, code tool,
``reward_model.sandbox.*`` keys or ``rlcore sandbox check`` is an error naming the distribution."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from rlcore_plugin_agents.tools import load_tools

from rlcore.cli import RLCoreGroup
from rlcore.config import ConfigError, load_config
from rlcore.errors import RLCoreError
from rlcore.plugins import PluginManager, make_plugin_manager, set_plugin_manager
from rlcore.reward.scoring import RegistryScorer
from rlcore.run import check_components

NAMED = "rlcore-plugin-sandbox, which is installed but"


@pytest.fixture
def without_sandbox(monkeypatch: pytest.MonkeyPatch) -> PluginManager:
    """The process's plugin manager, loaded with rlcore-plugin-sandbox disabled (the previous one put back)."""
    monkeypatch.setenv("RLCORE_DISABLE_PLUGINS", "rlcore-plugin-sandbox")
    manager = make_plugin_manager()
    previous = set_plugin_manager(manager)
    yield manager
    set_plugin_manager(previous)


def test_the_code_scorer_names_the_plugin(without_sandbox: PluginManager) -> None:
    with pytest.raises(RLCoreError, match=f"unknown reward_scorer 'apps': it is provided by {NAMED}"):
        RegistryScorer(without_sandbox.registry)("apps", "print(3)", '{"inputs": [""], "outputs": ["3"]}')


def test_the_code_tool_names_the_plugin(without_sandbox: PluginManager, tmp_path: Path) -> None:
    path = tmp_path / "tools.yaml"
    path.write_text("tools:\n  - class_name: code_interpreter\n")
    with pytest.raises(RLCoreError, match=f"tools\\[0\\]: unknown tool 'code_interpreter': it is provided by {NAMED}"):
        load_tools(str(path), without_sandbox.registry)


def test_the_sandbox_keys_name_the_plugin(without_sandbox: PluginManager) -> None:
    """``reward_model.sandbox`` is the plugin's own section: without the plugin, setting one of its keys is the
    loader's error naming the distribution (before anything is built), and a config without them needs nothing."""
    with pytest.raises(ConfigError, match=f"'reward_model.sandbox.allow_unconfined' is a key of {NAMED} did not load"):
        load_config(overrides=["reward_model.sandbox.allow_unconfined=true"], manager=without_sandbox)
    check_components(load_config(manager=without_sandbox), without_sandbox)


def test_the_sandbox_command_names_the_plugin() -> None:
    """A command line without the plugin's commands (``rlcore`` with the plugin disabled) names it."""
    result = CliRunner().invoke(RLCoreGroup(), ["sandbox", "check"])
    assert result.exit_code == 2
    assert "No such command 'sandbox': `rlcore sandbox` is added by rlcore-plugin-sandbox, which is installed but" in (
        result.output
    )
    assert "No such command 'nosuch'." in CliRunner().invoke(RLCoreGroup(), ["nosuch"]).output
