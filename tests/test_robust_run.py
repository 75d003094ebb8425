"""Runs that meet bad input or faults: graceful signals, verified checkpoints, honest steps, clear model errors,
generation dumps and asynchronous rewards. Each run is a real tiny run (local executor, FSDP2 on gloo)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rlcore_testkit.runs import make_tiny_task, tiny_overrides, tiny_run

from rlcore.checkpoint import CheckpointError, resume_path
from rlcore.config.schema import TrainerConfig
from rlcore.errors import RLCoreError
from rlcore.tracking.sinks import read_metrics


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_tiny_task(tmp_path_factory.mktemp("task"))


def test_generations_are_dumped_and_rewards_scored_asynchronously(
    tmp_path: Path, tiny_model_dir: Path, task: dict[str, Path]
) -> None:
    _, run_dir = tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        "reward_model.launch_reward_fn_async=true",
        f"trainer.rollout_data_dir={tmp_path / 'rollouts'}",
        f"trainer.validation_data_dir={tmp_path / 'val'}",
    )
    assert sorted(p.name for p in (tmp_path / "rollouts").iterdir()) == ["1.jsonl", "2.jsonl"]
    rows = [json.loads(line) for line in (tmp_path / "rollouts" / "2.jsonl").read_text().splitlines()]
    assert len(rows) == 16 and {"input", "output", "gts", "score", "step"} <= set(rows[0]) and rows[0]["step"] == 2
    metrics = read_metrics(run_dir / "metrics.jsonl")
    assert [round(sum(r["score"] for r in rows) / 16, 4)] == [round(metrics[-1]["critic/score/mean"], 4)]
    assert sorted(p.name for p in (tmp_path / "val").iterdir()) == ["0.jsonl", "1.jsonl", "2.jsonl"]


def _damage(file: Path, truncate: bool) -> None:
    if truncate:
        with file.open("r+b") as handle:
            handle.truncate(file.stat().st_size // 2)
    else:
        with file.open("r+b") as handle:
            handle.seek(min(64, file.stat().st_size // 4))
            handle.write(os.urandom(4096))


def _largest_file(folder: Path) -> Path:
    return max((p for p in folder.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)


@pytest.fixture(scope="module")
def two_checkpoints(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path, task: dict[str, Path]) -> Path:
    """The checkpoint folder of one tiny run saving steps 1 and 2 (each test damages its own copy)."""
    tmp = tmp_path_factory.mktemp("two-checkpoints")
    tiny_run(tmp, tiny_model_dir, task, "trainer.save_freq=1", "trainer.test_freq=-1")
    return tmp / "ckpt"


@pytest.mark.parametrize("truncate", [False, True], ids=["overwritten", "truncated"])
def test_a_damaged_checkpoint_is_named_and_the_newest_intact_one_resumed(
    tmp_path: Path, two_checkpoints: Path, truncate: bool, caplog: pytest.LogCaptureFixture
) -> None:
    import shutil

    root = tmp_path / "ckpt"
    shutil.copytree(two_checkpoints, root)
    shard = _largest_file(root / "global_step_2")
    _damage(shard, truncate)
    with caplog.at_level("WARNING"):
        assert resume_path(TrainerConfig(default_local_dir=str(root))) == root / "global_step_1"
    word = "truncated" if truncate else "damaged"
    assert f"file {shard.relative_to(root / 'global_step_2').as_posix()} is {word}" in caplog.text
    chosen = TrainerConfig(
        default_local_dir=str(root), resume_mode="resume_path", resume_from_path=str(root / "global_step_2")
    )
    with pytest.raises(CheckpointError, match=f"global_step_2: file .* is {word}"):
        resume_path(chosen)


def test_total_training_steps_is_honoured_and_a_missing_model_is_one_line(
    tmp_path: Path, tiny_model_dir: Path, task: dict[str, Path]
) -> None:
    with pytest.raises(RLCoreError, match=r"actor_rollout_ref.model.path=/nonexistent/model: no such folder"):
        tiny_run(tmp_path, tiny_model_dir, task, "actor_rollout_ref.model.path=/nonexistent/model")
    not_a_model = tmp_path / "empty"
    not_a_model.mkdir()
    with pytest.raises(RLCoreError, match="is not a model folder: it has no config.json"):
        tiny_run(tmp_path, tiny_model_dir, task, f"actor_rollout_ref.model.path={not_a_model}")


def _copy_model(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_corrupt_model_files_are_named(tmp_path: Path, tiny_model_dir: Path) -> None:
    from omegaconf import OmegaConf

    from rlcore.model_check import ModelPathError, check_model_paths

    def config(path: Path):
        return OmegaConf.create(
            {
                "actor_rollout_ref": {"model": {"path": str(path), "tokenizer_path": None}},
                "critic": {"enable": None, "model": {"path": str(path)}},
            }
        )

    check_model_paths(config(tiny_model_dir))
    bad_json = _copy_model(tiny_model_dir, tmp_path / "json")
    (bad_json / "config.json").write_text("{not json")
    with pytest.raises(ModelPathError, match=r"config.json is not valid JSON"):
        check_model_paths(config(bad_json))
    weights = _copy_model(tiny_model_dir, tmp_path / "weights")
    shard = next(weights.glob("*.safetensors"))
    _damage(shard, truncate=True)
    with pytest.raises(ModelPathError, match=r"weights file .*safetensors"):
        check_model_paths(config(weights))
    no_tokenizer = _copy_model(tiny_model_dir, tmp_path / "tok")
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.json"):
        (no_tokenizer / name).unlink(missing_ok=True)
    with pytest.raises(ModelPathError, match="has no tokenizer"):
        check_model_paths(config(no_tokenizer))


SIGNAL_SCRIPT = """
import sys
from rlcore.run import run_training
run_training([], sys.argv[1:], [])
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_finishes_the_step_writes_the_summary_and_saves(
    tmp_path: Path, tiny_model_dir: Path, task: dict[str, Path], signum: int
) -> None:
    args = [
        *tiny_overrides(tmp_path, tiny_model_dir, task),
        "trainer.total_training_steps=200",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        "trainer.save_on_signal=true",
    ]
    proc = subprocess.Popen(
        [sys.executable, "-c", SIGNAL_SCRIPT, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    metrics_files: list[Path] = []
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not metrics_files:
        metrics_files = [p for p in (tmp_path / "runs").glob("*/*/metrics.jsonl") if p.stat().st_size > 0]
        time.sleep(0.5)
    assert metrics_files, "no step was logged"
    proc.send_signal(signum)
    output, _ = proc.communicate(timeout=240)
    assert proc.returncode == 128 + signum, output
    assert "Traceback" not in output
    run_dir = metrics_files[0].parent
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == f"interrupted by {signal.Signals(signum).name}"
    steps = [row["step"] for row in read_metrics(run_dir / "metrics.jsonl")]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) < 200
    assert (tmp_path / "ckpt" / f"global_step_{steps[-1]}").is_dir(), "save_on_signal saved the last step"
    assert f"newest checkpoint: {tmp_path / 'ckpt' / f'global_step_{steps[-1]}'}" in output


def test_non_finite_steps_in_a_row_stop_the_run() -> None:
    from rlcore.config import load_config
    from rlcore.config.schema import Sections
    from rlcore.controller.trainer import Trainer

    trainer = Trainer.__new__(Trainer)  # only the counting logic: no workers needed
    trainer.config = load_config([], ["trainer.max_nonfinite_steps=2"], [])
    trainer.sections = Sections.from_tree(trainer.config)
    trainer.nonfinite_in_a_row = 0
    for step, skipped in enumerate([1.0, 0.0, 1.0], start=1):
        metrics = {"actor/grad_norm_nonfinite": skipped}
        trainer._count_nonfinite(metrics)
        trainer._stop_if_nonfinite(step)
    assert metrics["training/nonfinite_steps_in_a_row"] == 1.0
    trainer._count_nonfinite({"critic/grad_norm_nonfinite": 2.0})
    with pytest.raises(
        RLCoreError,
        match=r"steps 3-4: the loss or gradient norm was not finite in 2 steps in a row "
        r"\(trainer.max_nonfinite_steps=2\)",
    ):
        trainer._stop_if_nonfinite(4)
