"""The plugin's registration: backend names, config sections, and a torch-free hooks module."""

from __future__ import annotations

import subprocess
import sys

from rlcore_plugin_fsdp.config import FSDPConfig
from rlcore_plugin_fsdp.hooks import config_defaults

from rlcore.plugins import load_plugins


def test_backend_registered_with_alias() -> None:
    """``fsdp`` and its alias ``fsdp2`` resolve to the backend, which builds FSDP engines."""
    from rlcore_plugin_fsdp.backend import FSDPBackend

    registry = load_plugins().registry
    backend = registry.load("training_backend", "fsdp")
    assert registry.load("training_backend", "fsdp2") is backend is FSDPBackend


def test_config_defaults_cover_actor_ref_and_critic() -> None:
    """The three ``fsdp_config`` sections carry verl's keys and land in the loaded config."""
    from rlcore.config import load_config

    sections = config_defaults()
    assert sections["actor_rollout_ref"]["actor"]["fsdp_config"] == FSDPConfig()
    assert sections["actor_rollout_ref"]["ref"]["fsdp_config"] == FSDPConfig()
    assert sections["critic"]["fsdp_config"] == FSDPConfig()
    assert sections["reward_model"]["fsdp_config"] == FSDPConfig()
    config = load_config(overrides=["critic.fsdp_config.param_offload=true"])
    assert config.critic.fsdp_config.param_offload is True
    assert config.actor_rollout_ref.ref.fsdp_config.dtype == "bf16"
    assert FSDPConfig.from_tree(config, "critic.fsdp_config").param_offload is True, "read back typed"


def test_hooks_module_does_not_import_torch() -> None:
    """Loading the plugin (``rlcore plugins``, config loading) must stay torch-free."""
    code = "import sys, rlcore_plugin_fsdp.hooks; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
