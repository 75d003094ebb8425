"""The reward curve ``rlcore run`` draws at its end (``reward_curve.png``): training reward with its min-max
band and validation reward, from a run's ``metrics.jsonl``."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from rlcore_plugin_report.plot import plot_reward_curve

from rlcore.errors import RLCoreError
from rlcore.tracking.sinks import JsonlTracker

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def jsonl(run_dir: Path) -> JsonlTracker:
    """A JSONL tracker writing ``run_dir/metrics.jsonl``."""
    config = OmegaConf.create({"trainer": {"project_name": "proj", "experiment_name": "exp", "logger": ["jsonl"]}})
    return JsonlTracker(project="proj", experiment="exp", config=config, run_dir=run_dir)


def write_metrics(run_dir: Path, records: list[tuple[int, dict[str, float]]]) -> Path:
    """Log ``records`` with a JSONL tracker and return the metrics file."""
    tracker = jsonl(run_dir)
    for step, metrics in records:
        tracker.log(metrics, step)
    tracker.finish()
    return run_dir / "metrics.jsonl"


def assert_png(path: Path) -> None:
    """The file is a PNG that matplotlib reads back with a non-empty image."""
    import matplotlib.image

    assert path.read_bytes()[:8] == PNG_SIGNATURE
    image = matplotlib.image.imread(path)
    assert image.shape[0] > 0 and image.shape[1] > 0


def train_record(step: int) -> dict[str, float]:
    """A training step's score metrics."""
    mean = step / 10
    return {"critic/score/mean": mean, "critic/score/min": 0.0, "critic/score/max": min(1.0, 2 * mean)}


def test_plot_reward_curve_with_validation(tmp_path: Path) -> None:
    records = [(0, {"val-core/openai/gsm8k/reward/mean@1": 0.1})]
    records += [(s, train_record(s)) for s in range(1, 6)]
    records.append((5, {"val-core/openai/gsm8k/reward/mean@1": 0.4, "val-core/openai/gsm8k/acc/mean@1": 0.4}))
    path = write_metrics(tmp_path, records)
    out = plot_reward_curve(path, tmp_path / "plots" / "reward.png")
    assert out == tmp_path / "plots" / "reward.png"
    assert_png(out)


def test_plot_reward_curve_without_validation(tmp_path: Path) -> None:
    path = write_metrics(tmp_path, [(s, train_record(s)) for s in range(1, 4)] + [(4, {"critic/score/mean": math.nan})])
    assert_png(plot_reward_curve(path, tmp_path / "reward.png"))


def test_plot_reward_curve_errors(tmp_path: Path) -> None:
    with pytest.raises(RLCoreError, match="does not exist"):
        plot_reward_curve(tmp_path / "missing.jsonl", tmp_path / "out.png")
    empty = tmp_path / "metrics.jsonl"
    empty.write_text("")
    with pytest.raises(RLCoreError, match="empty"):
        plot_reward_curve(empty, tmp_path / "out.png")
    write_metrics(tmp_path / "other", [(1, {"actor/pg_loss": 0.1})])
    with pytest.raises(RLCoreError, match="no reward metric"):
        plot_reward_curve(tmp_path / "other" / "metrics.jsonl", tmp_path / "out.png")
    assert not (tmp_path / "out.png").exists()
