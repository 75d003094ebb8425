"""A third-party run-health monitor scaffolded with ``rlcore new plugin`` fires in a real run: the template's
score-drop monitor, rendered with only the ``health_monitor`` switch on, plugged in as its distribution would be
(its ``hooks`` module, whose ``config_defaults`` mounts ``trainer.monitors.<name>``), watches eight steps of the
bundled task with a threshold low enough that the noisy training score trips it, and its finding reaches the
metrics, the console and ``summary.json`` like a built-in monitor's. (``tests/test_template.py`` installs the
scaffolded project into a venv of its own and runs its generated contract test.)"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rlcore_testkit.pytest_plugin import registered

from rlcore.api import KINDS, make_plugin_manager, run_training, set_plugin_manager
from rlcore.tracking.sinks import read_metrics

NAME = "demo-drop"


@pytest.fixture(scope="module")
def scaffolded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The rendered project's ``hooks`` module, importable for the module's tests."""
    import subprocess

    tmp = tmp_path_factory.mktemp("scaffold")
    switches = [f"{kind}={'yes' if kind == 'health_monitor' else 'no'}" for kind in KINDS]
    command = [sys.executable, "-m", "rlcore", "new", "plugin", "--no-input", "--output-dir", str(tmp / "out")]
    subprocess.run([*command, f"plugin_name={NAME}", *switches], cwd=tmp, check=True, capture_output=True)
    src = tmp / "out" / f"rlcore-plugin-{NAME}" / "src"
    sys.path.insert(0, str(src))
    try:
        yield importlib.import_module(f"rlcore_plugin_{NAME.replace('-', '_')}.hooks")
    finally:
        sys.path.remove(str(src))


@pytest.fixture(scope="module")
def watched_run(tmp_path_factory: pytest.TempPathFactory, scaffolded: Any) -> dict[str, Any]:
    """Eight steps of the bundled task with the scaffolded monitor (and no built-in one) at ``drop=0.01``."""
    tmp = tmp_path_factory.mktemp("watched")
    disabled = os.environ.get("RLCORE_DISABLE_PLUGINS")
    os.environ["RLCORE_DISABLE_PLUGINS"] = ",".join(filter(None, [disabled, "rlcore-plugin-health"]))
    previous = set_plugin_manager(make_plugin_manager())
    output = io.StringIO()
    try:
        with registered(scaffolded, name=f"rlcore-plugin-{NAME}"), contextlib.redirect_stdout(output):
            run_training(
                [],
                [
                    "trainer.total_training_steps=8",
                    "trainer.test_freq=-1",
                    "trainer.progress_bar=false",
                    "trainer.report=false",
                    f"trainer.runs_dir={tmp / 'runs'}",
                    f"trainer.default_local_dir={tmp / 'ckpt'}",
                    f"trainer.monitors.{NAME}.drop=0.01",
                    f"trainer.monitors.{NAME}.min_steps=1",
                ],
                [],
            )
    finally:
        set_plugin_manager(previous)
        if disabled is None:
            del os.environ["RLCORE_DISABLE_PLUGINS"]
        else:
            os.environ["RLCORE_DISABLE_PLUGINS"] = disabled
    (run_dir,) = (tmp / "runs").glob("*/*")
    return {"run_dir": run_dir, "output": output.getvalue()}


def test_the_scaffolded_monitor_fires_in_a_run(watched_run: dict[str, Any]) -> None:
    run_dir: Path = watched_run["run_dir"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed"
    findings = [row for row in summary["health"] if row["monitor"] == NAME]
    assert findings, "the scaffolded monitor found no fall of the training score in eight steps"
    first = findings[0]
    assert first["signal"] == "critic/score/mean" and first["action"] == "warn"
    assert first["message"].startswith("training score fell: critic/score/mean ")
    rows = {row["step"]: row for row in read_metrics(run_dir)}
    assert rows[first["step"]][f"health/{NAME}/finding"] == 1.0
    assert f"health: [warning] {NAME}: {first['message']}" in watched_run["output"].splitlines()
    # the finding is a real fall: below the best score of the steps before it by more than the threshold
    scores = [
        row["critic/score/mean"] for step, row in rows.items() if step <= first["step"] and "critic/score/mean" in row
    ]
    assert rows[first["step"]]["critic/score/mean"] < max(scores) - 0.01
