"""RLCORE_LOAD_PLUGINS naming no installed plugin is flagged (fatal under --strict); a component missing
because its plugin is disabled says so. Real subprocesses with the variables set."""

from __future__ import annotations

import sys
from pathlib import Path


def test_an_allow_list_naming_no_installed_plugin_is_flagged(run) -> None:
    env = {"RLCORE_LOAD_PLUGINS": "rlcore-plugin-grpp"}
    lenient = run([sys.executable, "-m", "rlcore", "plugins"], env=env, check=False)
    assert "RLCORE_LOAD_PLUGINS names 'rlcore-plugin-grpp', which is not an installed rlcore plugin" in lenient.stdout
    strict = run([sys.executable, "-m", "rlcore", "plugins", "--strict"], env=env, check=False)
    assert strict.returncode != 0
    assert "rlcore-plugin-grpp" in strict.stdout + strict.stderr


def test_a_component_of_a_disabled_plugin_names_the_plugin(run) -> None:
    args = [
        sys.executable,
        "-m",
        "rlcore",
        "run",
        "--dry-run",
        "data.train_files=x.parquet",
        "actor_rollout_ref.model.path=m",
        "algorithm.adv_estimator=grpo",
    ]
    result = run(args, env={"RLCORE_DISABLE_PLUGINS": "rlcore-plugin-grpo"}, check=False)
    assert result.returncode == 2
    assert "plugin rlcore-plugin-grpo provides it but is disabled by RLCORE_DISABLE_PLUGINS" in result.stderr
    assert "Traceback" not in result.stderr


def test_profiling_without_the_profiler_plugin_stops_the_run_before_it_starts(
    run, tmp_path: Path, tiny_model_dir: Path
) -> None:
    """``global_profiler.tool`` set while rlcore-plugin-profiler is disabled: a real ``rlcore run`` of the tiny
    task stops before anything starts (no run directory, no checkpoint folder), naming the plugin."""
    from rlcore_testkit.runs import make_tiny_task, tiny_overrides

    task = make_tiny_task(tmp_path / "task")
    args = [sys.executable, "-m", "rlcore", "run", *tiny_overrides(tmp_path, tiny_model_dir, task)]
    args += ["global_profiler.tool=torch", "global_profiler.steps=[1]"]
    result = run(args, env={"RLCORE_DISABLE_PLUGINS": "rlcore-plugin-profiler"}, check=False)
    assert result.returncode == 2, result.stdout + result.stderr
    assert (
        "config key 'global_profiler.tool' is a key of rlcore-plugin-profiler, which is installed but did not load "
        "(disabled or failed: see `rlcore plugins`)"
    ) in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "ckpt").exists()
