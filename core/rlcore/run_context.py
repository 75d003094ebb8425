"""The object handed to lifecycle hooks."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from rlcore.checkpoint.ownership import RunIdentity

#: the folder of the run directory that ``trainer.save_final_model`` writes the trained policy to (Hugging Face
#: format)
FINAL_MODEL = "model"


@dataclass
class RunContext:
    """What a lifecycle hook may know about the run: its resolved config, its directory, the plugins, and
    its identity (``identity.run_id``; the checkpoints it writes record it)."""

    config: DictConfig
    run_dir: Path
    plugins: dict[str, str | None] = field(default_factory=dict)
    derived: dict[str, Any] = field(default_factory=dict)
    identity: RunIdentity | None = None
    #: the run-health findings so far (:meth:`rlcore.api.Finding.as_dict` rows with the monitor's ``action``),
    #: written to ``summary.json`` under ``"health"``
    health: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        """A run gets a fresh identity unless one is given."""
        if self.identity is None:
            self.identity = RunIdentity.new(self.run_dir)

    @property
    def final_model(self) -> Path:
        """Where ``trainer.save_final_model`` writes the trained policy: ``<run directory>/model``."""
        return self.run_dir / FINAL_MODEL

    def save_derived(self) -> None:
        """Write :attr:`derived` (the batch arithmetic, and the device peak once the workers are up) to
        ``derived.json`` in the run directory."""
        (self.run_dir / "derived.json").write_text(json.dumps(self.derived, indent=2))
