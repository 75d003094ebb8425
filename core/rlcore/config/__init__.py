"""Run configuration: verl's key tree, plugin-contributed sections, presets, files and overrides.

The order of precedence (later wins): rlcore's defaults and every plugin's ``config_defaults`` → presets
(``--preset NAME``) → the ``--config-name`` config → YAML files → ``key=value`` overrides. A key that
nobody declares is an error naming the key, where it came from, and the closest known key (or the verl
feature it belongs to); every such problem is reported at once. verl's spellings of renamed keys are
accepted (:mod:`rlcore.config.aliases`). A field typed as a mapping (for example
``reward_model.reward_kwargs: {}``) is free-form: any key may be set below it (:mod:`rlcore.config.free_form`).
``+key=value`` (Hydra's "add a key") is accepted there and at declared keys only; elsewhere it is an unknown key.
"""

from __future__ import annotations

from rlcore.config.compose import CommandLine, parse_command_line
from rlcore.config.loader import config_to_yaml, default_config, load_config
from rlcore.config.problems import ConfigError, Problems
from rlcore.config.validate import DerivedQuantities, check_values, derive_quantities

__all__ = [
    "CommandLine",
    "ConfigError",
    "DerivedQuantities",
    "Problems",
    "check_values",
    "config_to_yaml",
    "default_config",
    "derive_quantities",
    "load_config",
    "parse_command_line",
]
