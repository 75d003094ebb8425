"""The bundled vision-language task (``--preset shapes-vl-cpu``): its pictures, rows, scorer, and two real
GRPO steps through ``rlcore run``'s code path (parquet with image bytes → RLDataset → FSDP with images →
HF rollout with images → rule reward) from the shipped warm-started model. Whether the reward rises is
measured by ``bench/shapes_vl.py``."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from rlcore_plugin_tasks import shapes_vl
from rlcore_testkit.contracts.components import PresetContract


class TestShapesVLPresetContract(PresetContract):
    component_name = "shapes-vl-cpu"


def test_score_reads_the_first_word() -> None:
    assert shapes_vl.score(shapes_vl.DATA_SOURCE, "Red", "red") == 1.0
    assert shapes_vl.score(shapes_vl.DATA_SOURCE, " blue square", "blue") == 1.0
    assert shapes_vl.score(shapes_vl.DATA_SOURCE, "yellow red", "red") == 0.0
    assert shapes_vl.score(shapes_vl.DATA_SOURCE, "", "red") == 0.0


def test_rows_hold_one_picture_in_verls_schema() -> None:
    samples = shapes_vl._samples(12, 0)
    row = shapes_vl._row(*samples[0], "train", 0)
    assert row["prompt"][0]["content"].count("<image>") == len(row["images"]) == 1
    image = Image.open(io.BytesIO(row["images"][0]["bytes"]))
    assert image.size == (56, 56) and row["reward_model"]["ground_truth"] in shapes_vl.COLOURS
    # the colour is in the picture: the shape's mean colour is nearest to the answer's reference colour
    for colour, _, picture in samples:
        pixels = np.asarray(picture).reshape(-1, 3)
        mean = pixels[(pixels != 245).any(axis=1)].mean(axis=0)
        nearest = min(shapes_vl.COLOURS, key=lambda n: sum((a - b) ** 2 for a, b in zip(shapes_vl.COLOURS[n], mean)))
        assert nearest == colour


@pytest.fixture(scope="module")
def task_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache folder holding the task's parquet files, small: 16 training and 4 test rows (the model is the
    shipped one)."""
    from rlcore_plugin_tasks.warm_start import write_parquet

    root = tmp_path_factory.mktemp("cache")
    assets = root / f"shapes-vl-{shapes_vl.TASK_VERSION}"
    assets.mkdir()
    write_parquet(
        [shapes_vl._row(*s, "train", i) for i, s in enumerate(shapes_vl._samples(16, 1))], assets / "train.parquet"
    )
    write_parquet(
        [shapes_vl._row(*s, "test", i) for i, s in enumerate(shapes_vl._samples(4, 2))], assets / "test.parquet"
    )
    return root


def test_two_grpo_steps_of_the_preset(task_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rlcore.run import run_training

    monkeypatch.setenv("RLCORE_CACHE", str(task_cache))
    last = run_training(
        [],
        [
            "data.train_batch_size=4",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
            "trainer.total_training_steps=2",
            "trainer.test_freq=2",
            "trainer.progress_bar=false",
            f"trainer.runs_dir={tmp_path / 'runs'}",
            f"trainer.default_local_dir={tmp_path / 'ckpt'}",
        ],
        ["shapes-vl-cpu"],
    )
    (run_dir,) = (tmp_path / "runs").glob("*/*")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len([row for row in rows if "actor/pg_loss" in row]) == 2
    assert math.isfinite(last["actor/pg_loss"])
    assert f"val-core/{shapes_vl.DATA_SOURCE}/reward/mean@1" in last, sorted(last)
