"""The publish path of a plugin: build ``plugins/algo_grpo``'s sdist and wheel, install the wheel alone into a
fresh venv that has rlcore (from its wheel) but neither the plugin's editable install nor its source tree,
and train two CPU steps with ``algorithm.adv_estimator=grpo`` from another directory."""

from __future__ import annotations

import json
import shutil
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

from rlcore.testing.runs import make_tiny_task, tiny_overrides

PLUGIN = Path(__file__).resolve().parents[1] / "plugins" / "algo_grpo"
DIST = "rlcore-plugin-grpo"


def build_dists(run: Any, tmp_path: Path) -> tuple[Path, Path]:
    """``python -m build --no-isolation`` (offline) of a clean copy of the plugin; returns (sdist, wheel)."""
    source = tmp_path / "algo_grpo"
    shutil.copytree(PLUGIN, source, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist"))
    out = tmp_path / "dist"
    run([sys.executable, "-m", "build", "--no-isolation", "--outdir", out, source])
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return sdist, wheel


def test_grpo_wheel_trains_in_a_fresh_venv(
    tmp_path: Path, run: Any, make_venv: Any, rlcore_wheel: Path, tiny_model_dir: Path
) -> None:
    """The built distributions carry the entry point and the rlcore range; the installed wheel trains."""
    sdist, wheel = build_dists(run, tmp_path)
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"pyproject.toml", "README.md", "src/rlcore_plugin_grpo/hooks.py", "tests/test_grpo.py"} <= names
    with zipfile.ZipFile(wheel) as archive:
        (info,) = {name.split("/")[0] for name in archive.namelist() if ".dist-info/" in name}
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
        metadata = archive.read(f"{info}/METADATA").decode()
    assert "[rlcore]\ngrpo = rlcore_plugin_grpo.hooks" in entry_points
    assert "Requires-Dist: rlcore<0.2,>=0.1" in metadata

    venv = make_venv(tmp_path / "venv", hidden=["rlcore", DIST])
    venv.install(rlcore_wheel, wheel)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = run([venv.python, "-c", "import rlcore_plugin_grpo; print(rlcore_plugin_grpo.__file__)"], cwd=elsewhere)
    assert Path(where.stdout.strip()).is_relative_to(venv.site_packages)
    # strict, and only this plugin and the fsdp backend: other plugins of this development environment
    # (visible in the venv) cannot break the run
    only_these = {"RLCORE_STRICT_PLUGINS": "1", "RLCORE_LOAD_PLUGINS": f"{DIST},rlcore-plugin-fsdp"}
    rows = json.loads(run([venv.bin("rlcore"), "plugins", "--json"], cwd=elsewhere, env=only_these).stdout)
    (row,) = [row for row in rows if row["name"] == DIST]
    assert row["status"] == "ok"

    task = make_tiny_task(tmp_path / "task")
    overrides = tiny_overrides(tmp_path / "run", tiny_model_dir, task)
    run([venv.bin("rlcore"), "run", *overrides, "algorithm.adv_estimator=grpo"], cwd=elsewhere, env=only_these)
    (run_dir,) = (tmp_path / "run" / "runs").glob("*/*")
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [step["training/global_step"] for step in steps if "actor/pg_loss" in step] == [1, 2]
    plugins = json.loads((run_dir / "plugins.json").read_text())
    version = next(line.split(": ", 1)[1] for line in metadata.splitlines() if line.startswith("Version: "))
    assert plugins[DIST] == {"version": version, "status": "ok", "builtin": False}
