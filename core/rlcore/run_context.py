"""The object handed to lifecycle hooks."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig


@dataclass
class RunContext:
    """What a lifecycle hook may know about the run: its resolved config, its directory, the plugins."""

    config: DictConfig
    run_dir: Path
    plugins: dict[str, str | None] = field(default_factory=dict)
    derived: dict[str, Any] = field(default_factory=dict)

    def save_derived(self) -> None:
        """Write :attr:`derived` (the batch arithmetic, and the device peak once the workers are up) to
        ``derived.json`` in the run directory."""
        (self.run_dir / "derived.json").write_text(json.dumps(self.derived, indent=2))
