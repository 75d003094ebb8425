"""The bundled SFT task: the arithmetic task's prompts with their correct answers.

``rlcore sft`` without data trains the arithmetic task's shipped warm-started model (the model of the preset
``arith-cpu``, which answers mostly off by one) on the correct sums of the training prompts, validating on the held-out
prompts; GRPO from the result (``rlcore run actor_rollout_ref.model.path=<checkpoint>/actor/huggingface``)
then starts from a model that is mostly right. The task is reached through its preset, which
rlcore-plugin-tasks registers: the preset's settings name the model and the task's parquet files, and its
``prepare`` writes them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlcore.api import ConfigSource, RunKit

#: the RL preset of the arithmetic task (rlcore-plugin-tasks), whose model and prompts the SFT task uses
TASK_PRESET = "arith-cpu"

#: the columns of the SFT parquet files (``data.prompt_key``, ``data.response_key``)
PROMPT_KEY = "prompt"
RESPONSE_KEY = "response"
#: the SFT files written beside the task's RL files
SFT_FILES: dict[str, str] = {"train": "sft-train.parquet", "val": "sft-val.parquet"}


def write_sft_data(task_dir: Path, out_dir: Path) -> dict[str, Path]:
    """Write ``sft-train.parquet`` / ``sft-val.parquet`` into ``out_dir`` from the task's ``train.parquet`` and
    ``test.parquet`` in ``task_dir``: ``prompt`` the user message (``"a+b="``), ``response`` its sum."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    for split, source in (("train", "train.parquet"), ("val", "test.parquet")):
        rows = pq.read_table(task_dir / source).to_pylist()
        pairs = [
            {PROMPT_KEY: row["prompt"][0]["content"], RESPONSE_KEY: str(row["reward_model"]["ground_truth"])}
            for row in rows
        ]
        path = out_dir / SFT_FILES[split]
        pq.write_table(pa.Table.from_pylist(pairs), path)
        written[split] = path
    return written


def _task_settings(kit: RunKit) -> dict[str, Any]:
    """The nested settings of :data:`TASK_PRESET` (an unknown-preset error names the distribution to install)."""
    return kit.preset_settings(TASK_PRESET)


def _task_root(task: dict[str, Any]) -> Path:
    """The arithmetic task's cache folder (where its ``train.parquet`` and the SFT files live), from ``task``,
    the preset's settings."""
    return Path(task["data"]["train_files"]).parent


def prepare_sft_assets(kit: RunKit) -> Path:
    """Write the arithmetic task's parquet files (the preset's ``prepare``, cached) and its SFT files; returns
    the task's cache folder."""
    kit.prepare_presets([TASK_PRESET])
    root = _task_root(_task_settings(kit))
    if not all((root / name).is_file() for name in SFT_FILES.values()):
        write_sft_data(root, root)
    return root


def bundled_source(kit: RunKit) -> ConfigSource:
    """The settings of the bundled SFT run (a config source, overridden by files and ``key=value``)."""
    task = _task_settings(kit)
    root = _task_root(task)
    settings: dict[str, Any] = {
        "data": {
            "train_files": str(root / SFT_FILES["train"]),
            "val_files": str(root / SFT_FILES["val"]),
            "prompt_key": PROMPT_KEY,
            "response_key": RESPONSE_KEY,
            "train_batch_size": 32,
            "micro_batch_size_per_gpu": 32,
            "max_length": 32,
        },
        "model": {"partial_pretrain": task["actor_rollout_ref"]["model"]["path"]},
        "optim": {"lr": 1e-4, "weight_decay": 0.0, "lr_warmup_steps_ratio": 0.0, "lr_scheduler": "constant"},
        "trainer": {
            "total_training_steps": 30,
            "test_freq": 10,
            "device": "cpu",
            "cpu_threads": 1,
            "logger": [],
            "project_name": "rlcore-default",
            "experiment_name": "arith-sft",
        },
    }
    return ConfigSource("bundled SFT task", settings)
