"""Contract suite for ``tracker`` components.

Subclass :class:`TrackerContract` in a test module, name the subclass ``Test...`` and set
``component_name``::

    from rlcore_testkit.contracts.tracker import TrackerContract

    class TestMyTracker(TrackerContract):
        component_name = "my_tracker"

        def read_back(self, run_dir):
            assert (run_dir / "my_tracker.log").exists()

Set ``tracking`` to the ``trainer.tracking`` settings the tracker needs offline (``{"wandb": {"mode":
"offline"}}``). The suite resolves the tracker through a freshly loaded plugin manager (the ``plugin_manager`` fixture
of the rlcore pytest plugin), constructs it in ``tmp_path`` with :meth:`make_config`, logs
:attr:`LOGGED_STEPS` (floats, ints and NaN), logs a small table and finishes, and then calls
:meth:`read_back` so that a tracker that writes files can check what it wrote.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest

from rlcore.api import PluginManager


class TrackerContract:
    """Tests every tracker must pass; subclasses set ``component_name`` (and may override hooks)."""

    #: the registered tracker name under test
    component_name: ClassVar[str] = ""
    #: ``trainer.tracking`` settings the suite's config carries (e.g. an offline mode)
    tracking: ClassVar[dict[str, Any]] = {}
    #: ``(step, metrics)`` pairs the suite logs, in order
    LOGGED_STEPS: ClassVar[list[tuple[int, dict[str, Any]]]] = [
        (1, {"critic/score/mean": 0.25, "critic/score/max": 1.0, "response_length/mean": 37.5}),
        (2, {"critic/score/mean": 0.5, "training/global_step": 2, "actor/pg_loss": float("nan")}),
        (3, {"critic/score/mean": 0.75, "val-core/openai/gsm8k/reward/mean@1": 0.6, "timing_s/gen": 1.25}),
    ]

    def make_config(self, run_dir: Path) -> Any:
        """The config passed to the tracker: a small ``DictConfig`` with the ``trainer`` section."""
        from omegaconf import OmegaConf

        return OmegaConf.create(
            {
                "trainer": {
                    "project_name": "rlcore-contract",
                    "experiment_name": f"{self.component_name}-contract",
                    "logger": [self.component_name],
                    "default_local_dir": str(run_dir / "checkpoints"),
                    "tracking": self.tracking,
                }
            }
        )

    def make_tracker(self, plugin_manager: PluginManager, run_dir: Path) -> Any:
        """Resolve the tracker class through the registry and construct it in ``run_dir``."""
        cls = plugin_manager.registry.load("tracker", self.component_name)
        config = self.make_config(run_dir)
        return cls(
            project=config.trainer.project_name,
            experiment=config.trainer.experiment_name,
            config=config,
            run_dir=run_dir,
        )

    def read_back(self, run_dir: Path) -> None:
        """Check what the tracker wrote under ``run_dir`` after :attr:`LOGGED_STEPS`; the default does nothing."""

    def test_is_registered(self, plugin_manager: PluginManager) -> None:
        """The name resolves to a tracker of kind ``tracker``."""
        assert self.component_name, f"{type(self).__name__} must set component_name"
        assert plugin_manager.registry.has("tracker", self.component_name)

    def test_has_tracker_methods(self, plugin_manager: PluginManager, tmp_path: Path) -> None:
        """The tracker has callable ``log`` and ``finish``."""
        tracker = self.make_tracker(plugin_manager, tmp_path)
        for method in ("log", "finish"):
            assert callable(getattr(tracker, method, None)), f"tracker has no callable {method}()"
        tracker.finish()

    def test_logs_steps_and_finishes(self, plugin_manager: PluginManager, tmp_path: Path) -> None:
        """Logging floats, ints and NaN over several steps and finishing raises nothing."""
        tracker = self.make_tracker(plugin_manager, tmp_path)
        for step, metrics in self.LOGGED_STEPS:
            tracker.log(dict(metrics), step)
        tracker.finish()
        self.read_back(tmp_path)

    def test_log_table_if_present(self, plugin_manager: PluginManager, tmp_path: Path) -> None:
        """``log_table``, when the tracker has it, accepts a list of rows."""
        tracker = self.make_tracker(plugin_manager, tmp_path)
        if not callable(getattr(tracker, "log_table", None)):
            pytest.skip("tracker has no log_table")
        rows = [{"input": "1+1=", "output": "2", "score": 1.0}, {"input": "2+2=", "output": "5", "score": 0.0}]
        tracker.log_table("val/generations", rows, 1)
        tracker.finish()
