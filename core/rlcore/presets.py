"""What a run's presets did, made visible: the first line names them (a bundled task's run is named after them
and the algorithm that runs by :mod:`rlcore.config.run_name`), and ``presets.json`` in the run directory records the keys each one set, which
``summary.json`` and the report show.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from rlcore.plugins import PluginManager

#: the file in a run directory that records the presets and the keys each one set
PRESETS_FILE = "presets.json"


def first_line(presets: list[str], bundled: bool) -> str | None:
    """The line a run starts with when presets apply: the bundled task's, naming every preset, or
    ``presets: a, b``; None without presets."""
    if not presets:
        return None
    names = ", ".join(presets)
    if bundled:
        word = "preset" if len(presets) == 1 else "presets"
        return f"No config file or data.train_files given: training the bundled CPU task ({word} {names})."
    return f"presets: {names}"


def preset_settings(config: DictConfig, presets: list[str], manager: PluginManager) -> list[dict[str, Any]]:
    """For each preset, in the order applied: ``{"name", "keys": {key: {"preset": value, "final": value}}}``,
    the keys it sets with its value and the run's final one (a later preset, file or override may change
    it)."""
    from omegaconf import OmegaConf

    from rlcore.config.loader import flatten, preset_fragment

    out = []
    for name in presets:
        keys = {}
        for key, value in flatten(preset_fragment(name, manager)).items():
            final = OmegaConf.select(config, key, default=None)
            if OmegaConf.is_config(final):
                final = OmegaConf.to_container(final, resolve=True)
            keys[key] = {"preset": value, "final": final}
        out.append({"name": name, "keys": keys})
    return out


def write_presets(run_dir: Path, settings: list[dict[str, Any]]) -> None:
    """Write ``presets.json`` (:func:`preset_settings`) into the run directory."""
    (run_dir / PRESETS_FILE).write_text(json.dumps(settings, indent=2, default=str))
