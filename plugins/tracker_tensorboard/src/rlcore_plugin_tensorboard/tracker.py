"""The ``tensorboard`` tracker: scalars, run metadata and validation tables as TensorBoard event files.

Settings (``trainer.tracking.tensorboard``; config wins over the environment, which wins over the default):

``log_dir``
    where the event files are written (``tensorboard --logdir`` it). Environment: ``TENSORBOARD_DIR``;
    default ``<run_dir>/tensorboard``.

The resolved config (as YAML) and the run metadata (as JSON) are text summaries ``rlcore/config`` and
``rlcore/metadata`` at step 0; validation generations are a markdown table per step under their name.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar

from rlcore.api import ExternalTracker, numeric_metrics, table_data, tracker_section
from rlcore_plugin_tensorboard.config import TensorboardConfig


class TensorboardTracker(ExternalTracker):
    """Writes scalars with ``torch.utils.tensorboard.SummaryWriter``, flushing after every step."""

    name: ClassVar[str] = "tensorboard"
    requires: ClassVar[tuple[str, ...]] = ("tensorboard",)
    extra: ClassVar[str] = "tensorboard"

    def start(self) -> None:
        """Open the writer and record the config and metadata as text."""
        import yaml
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = tracker_section(self.config, TensorboardConfig).chosen_log_dir(self.run_dir)
        self.writer = SummaryWriter(log_dir=self.log_dir)
        config_yaml = yaml.safe_dump(self.config_dict, sort_keys=False, default_flow_style=False)
        self.writer.add_text("rlcore/config", _code_block(config_yaml), 0)
        self.writer.add_text("rlcore/metadata", _code_block(json.dumps(self.metadata, indent=2)), 0)
        self.writer.flush()

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        """Add one scalar per finite numeric metric and flush."""
        for key, value in numeric_metrics(metrics).items():
            self.writer.add_scalar(key, value, int(step))
        self.writer.flush()

    def log_table(self, name: str, rows: list[dict[str, Any]], step: int) -> None:
        """Add the rows as a markdown table (TensorBoard's text plugin renders it)."""
        if not rows:
            return
        columns, data = table_data(rows, step)
        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(_markdown_cell(cell) for cell in row) + " |" for row in data]
        self.writer.add_text(name, "\n".join(lines), int(step))
        self.writer.flush()

    def close(self) -> None:
        """Flush and close the event file."""
        self.writer.close()


def _code_block(text: str) -> str:
    """Markdown code block by indentation (TensorBoard's markdown renders it verbatim)."""
    return "\n".join("    " + line for line in text.splitlines())


def _markdown_cell(value: Any) -> str:
    text = "" if value is None else str(value)
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", "<br>")
