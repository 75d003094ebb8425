"""A run of a bundled task never builds a model, so it never imports rlcore's test kit: the presets, their
``prepare`` (the parquet files) and the scorers run without ``rlcore_testkit``, which only
``build_base_model`` / ``base_tokenizer`` / ``warm_start.task_model`` (``python -m rlcore_plugin_tasks.build_base``)
import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = """
import importlib, sys
from rlcore import load_plugins
from rlcore.run import prepare_presets

manager = load_plugins()
for name in ("arith-cpu", "arith-chain-cpu", "arith-tools-cpu", "shapes-vl-cpu", "arith-tail-cpu"):
    settings = manager.registry.load("preset", name)()
    assert settings["actor_rollout_ref.model.path"], name
    prepare_presets(manager, [name], None)
for name in ("rlcore/arith", "rlcore/arith_chain", "rlcore/arith_tools", "rlcore/shapes_vl"):
    manager.registry.load("reward_scorer", name)("x", "1 2", "2")
print(sorted(m for m in sys.modules if m.startswith("rlcore_testkit")))
"""


BUILD_WITHOUT_TEST_KIT = """
import sys
sys.modules["rlcore_testkit"] = None  # the test kit is not installed
from rlcore_plugin_tasks.build_base import main
main(sys.argv[1:])
"""


def test_build_base_without_the_test_kit_names_the_extra(tmp_path: Path) -> None:
    """``build_base`` without ``rlcore-testkit`` stops with one line naming the extra to install, before it
    builds anything."""
    result = subprocess.run(
        [sys.executable, "-c", BUILD_WITHOUT_TEST_KIT, "arith", "--out", str(tmp_path / "out"), "--steps", "1"],
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines()[-1].endswith(
        "building a model needs rlcore's test kit: pip install 'rlcore-plugin-tasks[build]'"
    ), result.stderr
    assert not (tmp_path / "out").exists()


def test_presets_prepare_and_scorers_do_not_import_the_test_kit(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        env={"PATH": "/usr/bin:/bin", "RLCORE_CACHE": str(tmp_path), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", result.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "arith-chain-v1",
        "arith-tail-v1",
        "arith-tools-v1",
        "arith-v1",
        "shapes-vl-v1",
    ]
