"""The tracker plugins (swanlab, wandb, tensorboard, mlflow) together, each with its real library offline or
local mode: two real training steps, then what each library wrote is read back from disk.

Also: a tracker that fails (at start and in the middle of the run) does not stop training; ``finish()``
never raises; a missing library is an error naming its ``pip install 'rlcore[...]'`` line before training
starts; settings follow "config, else environment variable, else default".
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf
from rlcore_testkit.runs import make_tiny_task, tiny_run

import rlcore
from rlcore.config import load_config
from rlcore.tracking.external import (
    TrackerConfigError,
    TrackerDependencyError,
    git_commit,
    preflight_trackers,
    setting_or_env,
    tracker_section,
)
from rlcore.tracking.sinks import read_metrics

TRACKER_ENV = (
    "SWANLAB_MODE",
    "SWANLAB_LOG_DIR",
    "WANDB_MODE",
    "WANDB_DIR",
    "WANDB_ENTITY",
    "TENSORBOARD_DIR",
    "MLFLOW_TRACKING_URI",
    "MLFLOW_EXPERIMENT_NAME",
)
SCORE = "critic/score/mean"
VAL = "val-core/tiny/digits/reward/mean@1"


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny task's parquet files and reward function."""
    return make_tiny_task(tmp_path_factory.mktemp("task"))


@pytest.fixture(scope="module")
def tracked_run(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path, task: dict[str, Path]):
    """Two training steps logged to all four trackers (swanlab local, wandb offline, tensorboard, mlflow
    file store), with two validation generations per validation; returns the run dir and its metrics."""
    with pytest.MonkeyPatch.context() as env:
        for name in TRACKER_ENV:
            env.delenv(name, raising=False)
        _, run_dir = tiny_run(
            tmp_path_factory.mktemp("tracked"),
            tiny_model_dir,
            task,
            "trainer.logger=[console,swanlab,wandb,tensorboard,mlflow]",
            "trainer.tracking.swanlab.mode=local",
            "trainer.tracking.wandb.mode=offline",
            "trainer.log_val_generations=2",
        )
        # swanlab's local mode sets SWANLAB_LOG_DIR for the process; the tracker must have restored it
        env_after = {name: os.environ.get(name) for name in TRACKER_ENV}
    return run_dir, read_metrics(run_dir), env_after


def series(records: list[dict[str, Any]], key: str) -> list[tuple[int, float]]:
    """``(step, value)`` of ``key`` in the run's own metrics.jsonl."""
    return [(r["step"], r[key]) for r in records if r.get(key) is not None]


def same_series(actual: list[tuple[int, float]], expected: list[tuple[int, float]]) -> bool:
    """Same steps, and values equal up to float32 rounding."""
    return [s for s, _ in actual] == [s for s, _ in expected] and [v for _, v in actual] == pytest.approx(
        [v for _, v in expected], rel=1e-6, abs=1e-9
    )


# ------------------------------------------------------------------------------------------ swanlab
def test_swanlab_local_logs(tracked_run) -> None:
    run_dir, records, env_after = tracked_run
    assert env_after["SWANLAB_LOG_DIR"] is None
    (swan_run,) = (run_dir / "swanlog").glob("run-*")
    logged = []
    for log in (swan_run / "logs").glob("*/*.log"):
        lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        logged.append([(line["index"], line["data"]) for line in lines])
    for key in (SCORE, VAL):
        assert any(same_series(points, series(records, key)) for points in logged), f"{key} not logged"
    names = next(swan_run.glob("run-*.swanlab")).read_bytes()
    assert SCORE.encode() in names and VAL.encode() in names
    config = (swan_run / "files" / "config.yaml").read_text()
    assert "total_training_steps" in config and "rlcore-plugin-grpo" in config and "git_commit" in config
    tables = [json.loads(p.read_text()) for p in (swan_run / "media" / "echarts").glob("*.json")]
    assert tables and all(t["_swanLab"] == "table" for t in tables)
    assert [c["field"] for c in tables[0]["colDefs"]] == ["step", "prompt", "response", "score"]
    assert {row["step"] for t in tables for row in t["rowData"]} == {0, 1, 2}


# -------------------------------------------------------------------------------------------- wandb
def test_wandb_offline_run(tracked_run) -> None:
    from rlcore_plugin_wandb.offline import history, offline_records

    run_dir, records, _ = tracked_run
    (offline,) = (run_dir / "wandb").glob("offline-run-*")
    logged = offline_records(next(offline.glob("run-*.wandb")))
    rows = history(logged)
    for key in (SCORE, VAL):
        assert same_series([(h["_step"], h[key]) for h in rows if key in h], series(records, key))
    (run,) = [r.run for r in logged if r.WhichOneof("record_type") == "run"]
    config = {item.key: json.loads(item.value_json) for item in run.config.update}
    assert config["trainer"]["total_training_steps"] == 2
    assert config["rlcore"]["git_commit"] == git_commit()
    assert "rlcore-plugin-grpo" in config["rlcore"]["plugins"]
    tables = [json.loads(p.read_text()) for p in (offline / "files" / "media" / "table").glob("val_generations_*.json")]
    assert len(tables) == 3 and all(t["columns"] == ["step", "prompt", "response", "score"] for t in tables)
    assert sorted(t["data"][0][0] for t in tables) == [0, 1, 2]


# -------------------------------------------------------------------------------------- tensorboard
def test_tensorboard_event_file(tracked_run) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir, records, _ = tracked_run
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    for key in (SCORE, VAL, "actor/pg_loss", "timing_s/gen"):
        assert same_series([(e.step, e.value) for e in events.Scalars(key)], series(records, key)), key
    config = events.Tensors("rlcore/config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "total_training_steps: 2" in config
    metadata = events.Tensors("rlcore/metadata/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "rlcore-plugin-grpo" in metadata and "git_commit" in metadata
    tables = events.Tensors("val_generations/text_summary")
    assert [t.step for t in tables] == [0, 1, 2]
    assert tables[0].tensor_proto.string_val[0].decode().startswith("| step | prompt | response | score |")


# ------------------------------------------------------------------------------------------- mlflow
def test_mlflow_file_store(tracked_run, monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow.tracking import MlflowClient

    run_dir, records, _ = tracked_run
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=(run_dir / "mlruns").as_uri())
    experiment = client.get_experiment_by_name("rlcore")  # trainer.project_name
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "run" and run.info.status == "FINISHED"
    history = client.get_metric_history(run.info.run_id, SCORE)
    assert same_series([(m.step, m.value) for m in history], series(records, SCORE))
    val = client.get_metric_history(run.info.run_id, "val-core/tiny/digits/reward/mean_at_1")
    assert same_series([(m.step, m.value) for m in val], series(records, VAL))
    assert run.data.params["trainer.total_training_steps"] == "2"
    assert run.data.params["actor_rollout_ref.rollout.n"] == "4"
    assert run.data.tags["rlcore.git_commit"] == str(git_commit())
    assert run.data.tags["rlcore.plugin.rlcore-plugin-grpo"]
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.yaml", "rlcore_metadata.json", "tables"} <= artifacts
    table = json.loads(Path(client.download_artifacts(run.info.run_id, "tables/val_generations.json")).read_text())
    assert table["columns"] == ["step", "prompt", "response", "score"]
    assert [row[0] for row in table["data"]] == [0, 0, 1, 1, 2, 2]


# -------------------------------------------------------------------------------------- failures
def test_failing_trackers_never_stop_training(
    tmp_path: Path, tiny_model_dir: Path, task: dict[str, Path], registered, caplog: pytest.LogCaptureFixture
) -> None:
    """tensorboard cannot start (its log dir lies under a regular file); mlflow's store breaks after step 1
    (its metrics folder replaced by a file, as a disk gone bad would). Both are reported once, training
    runs both steps and every other tracker keeps logging."""
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where a folder should be")

    def on_step_end(run, step, metrics):
        if step == 1:
            (metrics_dir,) = (Path(run.run_dir) / "mlruns").glob("*/*/metrics")
            shutil.rmtree(metrics_dir)
            metrics_dir.write_text("broken store")

    plugin = types.SimpleNamespace(on_step_end=rlcore.hookimpl(on_step_end))
    with registered(plugin, name="store-breaker"), caplog.at_level(logging.WARNING, logger="rlcore.tracking"):
        last, run_dir = tiny_run(
            tmp_path,
            tiny_model_dir,
            task,
            "trainer.logger=[console,tensorboard,mlflow]",
            f"trainer.tracking.tensorboard.log_dir={blocker / 'tb'}",
            "trainer.report=true",
        )
    assert last["training/global_step"] == 2
    assert [r["step"] for r in read_metrics(run_dir)] == [0, 1, 2]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len([w for w in warnings if "'tensorboard'" in w]) == 1
    assert any("'tensorboard' could not be started" in w for w in warnings)
    assert len([w for w in warnings if "'mlflow'" in w]) == 1
    assert any("'mlflow' failed in log()" in w for w in warnings)
    assert (run_dir / "report" / "index.html").is_file()


def test_finish_never_raises(tmp_path: Path, plugin_manager: Any, caplog: pytest.LogCaptureFixture) -> None:
    """The mlflow store disappears before ``finish()``: the error is logged, not raised; finishing again is a no-op."""
    cls = plugin_manager.registry.load("tracker", "mlflow")
    config = OmegaConf.create({"trainer": {"project_name": "p", "experiment_name": "e"}})
    tracker = cls(project="p", experiment="e", config=config, run_dir=tmp_path)
    tracker.log({SCORE: 0.5}, 1)
    shutil.rmtree(tmp_path / "mlruns")
    with caplog.at_level(logging.WARNING, logger="rlcore.tracking"):
        tracker.finish()
        tracker.finish()
    finish_warnings = [r.getMessage() for r in caplog.records if "failed to finish" in r.getMessage()]
    assert len(finish_warnings) == 1 and "'mlflow'" in finish_warnings[0]


# ------------------------------------------------------------------------------- missing libraries
HIDE_AND_PREFLIGHT = """
import sys
for module in ("swanlab", "wandb", "tensorboard", "mlflow"):
    sys.modules[module] = None  # a real import failure: `import swanlab` raises ImportError
from rlcore.config import load_config
from rlcore.errors import RLCoreError
from rlcore.plugins import load_plugins
from rlcore.tracking.external import preflight_trackers
registry = load_plugins().registry
for name in ("swanlab", "wandb", "tracking", "tensorboard", "mlflow"):
    try:
        preflight_trackers(load_config(overrides=[f"trainer.logger=[console,{name}]"]), registry)
    except RLCoreError as exc:
        print(f"{name}: {type(exc).__name__}: {exc}")
    else:
        print(f"{name}: no error")
"""


def test_missing_library_names_the_pip_line() -> None:
    result = subprocess.run([sys.executable, "-c", HIDE_AND_PREFLIGHT], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = dict(line.split(": ", 1) for line in result.stdout.splitlines())
    for name, extra in (
        ("swanlab", "swanlab"),
        ("wandb", "wandb"),
        ("tracking", "wandb"),
        ("tensorboard", "tensorboard"),
        ("mlflow", "mlflow"),
    ):
        assert lines[name].startswith("TrackerDependencyError:"), lines[name]
        assert f"pip install 'rlcore[{extra}]'" in lines[name] and "is not installed" in lines[name]


def test_rlcore_run_stops_before_training_when_a_tracker_library_is_missing(tmp_path: Path) -> None:
    script = (
        "import sys; sys.modules['wandb'] = None; from rlcore.cli import main; "
        "sys.argv = ['rlcore', 'run', 'trainer.logger=[console,wandb]', "
        f"'trainer.runs_dir={tmp_path / 'runs'}']; main()"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLCORE_")}
    env["RLCORE_CACHE"] = str(tmp_path / "cache")
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env
    )
    assert result.returncode == 2
    assert "pip install 'rlcore[wandb]'" in result.stderr and "'wandb'" in result.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "cache").exists()  # nothing was started


def test_bad_mode_is_a_config_error_before_training(plugin_manager: Any) -> None:
    config = load_config(overrides=["trainer.logger=[wandb]", "trainer.tracking.wandb.mode=offlin"])
    with pytest.raises(TrackerConfigError, match=r"trainer.tracking.wandb.mode .*'offlin'.*online, offline"):
        preflight_trackers(config, plugin_manager.registry)
    preflight_trackers(load_config(overrides=["trainer.logger=[console,swanlab,tracking]"]), plugin_manager.registry)
    assert issubclass(TrackerDependencyError, rlcore.errors.RLCoreError)


# -------------------------------------------------------------------------------------- settings
def test_config_wins_over_environment_which_wins_over_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WANDB_MODE", raising=False)
    assert setting_or_env(None, "WANDB_MODE", "online") == "online"
    monkeypatch.setenv("WANDB_MODE", "")  # an empty variable counts as unset
    assert setting_or_env(None, "WANDB_MODE", "online") == "online"
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert setting_or_env(None, "WANDB_MODE", "online") == "offline"
    assert setting_or_env("disabled", "WANDB_MODE", "online") == "disabled"
    assert setting_or_env(None, None, "online") == "online"


def test_typed_tracker_sections_follow_the_rule(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each tracker reads its typed ``trainer.tracking.<name>`` section; a null field (or a key, or the whole
    section, a small hand-made config lacks) is not set: the environment, else the section's default."""
    from rlcore_plugin_mlflow.config import MlflowConfig
    from rlcore_plugin_swanlab.config import SwanlabConfig
    from rlcore_plugin_tensorboard.config import TensorboardConfig
    from rlcore_plugin_wandb.config import WandbConfig

    for name in TRACKER_ENV:
        monkeypatch.delenv(name, raising=False)
    unset = OmegaConf.create({"trainer": {"tracking": {"wandb": {"mode": None}}}})
    explicit = OmegaConf.create({"trainer": {"tracking": {"wandb": {"mode": "disabled"}}}})
    bare = OmegaConf.create({"trainer": {}})
    assert tracker_section(unset, WandbConfig).chosen_mode() == WandbConfig.DEFAULT_MODE == "online"
    assert tracker_section(bare, WandbConfig) == WandbConfig()
    assert tracker_section(bare, WandbConfig).chosen_mode() == "online"
    assert tracker_section(bare, WandbConfig).chosen_dir(tmp_path) == str(tmp_path)
    assert tracker_section(bare, WandbConfig).chosen_entity() is None
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert tracker_section(unset, WandbConfig).chosen_mode() == "offline"
    assert tracker_section(explicit, WandbConfig).chosen_mode() == "disabled"
    assert tracker_section(bare, SwanlabConfig).chosen_mode() == "cloud"
    assert tracker_section(bare, SwanlabConfig).chosen_logdir(tmp_path) == str(tmp_path / "swanlog")
    monkeypatch.setenv("SWANLAB_LOG_DIR", str(tmp_path / "env"))
    assert tracker_section(bare, SwanlabConfig).chosen_logdir(tmp_path) == str(tmp_path / "env")
    assert tracker_section(bare, TensorboardConfig).chosen_log_dir(tmp_path) == str(tmp_path / "tensorboard")
    mlflow = tracker_section(
        OmegaConf.create({"trainer": {"tracking": {"mlflow": {"experiment_name": "x"}}}}), MlflowConfig
    )
    assert mlflow.chosen_tracking_uri(tmp_path) == str(tmp_path / "mlruns")
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "from-env")
    assert mlflow.chosen_experiment_name("project") == "x"
    assert tracker_section(bare, MlflowConfig).chosen_experiment_name("project") == "from-env"
    # the loaded config holds every section (the plugins mount them), null by default
    loaded = load_config()
    for kind in (WandbConfig, SwanlabConfig, TensorboardConfig, MlflowConfig):
        assert tracker_section(loaded, kind) == kind.from_tree(loaded) == kind()


def test_tensorboard_dir_from_environment_and_config(
    tmp_path: Path, plugin_manager: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    cls = plugin_manager.registry.load("tracker", "tensorboard")
    monkeypatch.setenv("TENSORBOARD_DIR", str(tmp_path / "from-env"))
    for config, where in (
        ({"trainer": {}}, tmp_path / "from-env"),
        (
            {"trainer": {"tracking": {"tensorboard": {"log_dir": str(tmp_path / "from-config")}}}},
            tmp_path / "from-config",
        ),
    ):
        tracker = cls(project="p", experiment="e", config=OmegaConf.create(config), run_dir=tmp_path / "run")
        tracker.log({SCORE: 1.0}, 1)
        tracker.finish()
        assert list(where.glob("events.out.tfevents.*"))
    assert not (tmp_path / "run" / "tensorboard").exists()
