"""``rlcore sft`` end to end on the tiny model, in process with the local executor: exact resume
(6 = 3 + resume + 3 steps), the same loss curve on the FSDP and the Megatron engines, the run directory,
the checkpoint's ``huggingface/`` export training with ``rlcore run``, and a repeated run moving the
first one's checkpoints aside."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_plugin_sft.run import run_sft
from rlcore_testkit.runs import make_tiny_task, tiny_run

from rlcore.checkpoint import RUN_FILE
from rlcore.errors import RLCoreError
from rlcore.tracking.sinks import read_metrics


@pytest.fixture(scope="module")
def sft_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Single-turn jsonl rows ``a+b=`` -> the sum (32 train, 8 validation)."""
    root = tmp_path_factory.mktemp("sft-data")
    files = {}
    for split, pairs in (("train", range(32)), ("val", range(32, 40))):
        lines = [json.dumps({"question": f"{i % 9}+{i // 9}=", "answer": str(i % 9 + i // 9)}) for i in pairs]
        files[split] = root / f"{split}.jsonl"
        files[split].write_text("\n".join(lines) + "\n")
    return files


def sft_overrides(tmp_path: Path, model_dir: Path, data: dict[str, Path], *extra: str) -> list[str]:
    """The overrides of :func:`sft`."""
    return [
        f"data.train_files={data['train']}",
        f"data.val_files={data['val']}",
        f"model.partial_pretrain={model_dir}",
        "data.train_batch_size=8",
        "data.micro_batch_size_per_gpu=4",
        "data.max_length=32",
        "optim.lr=1e-3",
        "optim.lr_scheduler=constant",
        "optim.lr_warmup_steps=4",
        "trainer.device=cpu",
        "trainer.progress_bar=false",
        "trainer.logger=[console]",
        f"trainer.runs_dir={tmp_path / 'runs'}",
        f"trainer.default_local_dir={tmp_path / 'ckpt'}",
        *extra,
    ]


def sft(tmp_path: Path, model_dir: Path, data: dict[str, Path], *extra: str) -> tuple[list[dict[str, Any]], Path]:
    """``rlcore sft`` on the tiny model and data, 8 sequences per step in micro-batches of 4; the metric rows
    and the run directory (the newest under ``tmp_path/runs``)."""
    run_sft([], sft_overrides(tmp_path, model_dir, data, *extra))
    run_dir = max((tmp_path / "runs").glob("*/*"), key=lambda p: p.stat().st_mtime)
    return read_metrics(run_dir / "metrics.jsonl"), run_dir


def weights(folder: Path) -> dict[str, torch.Tensor]:
    """The Hugging Face weights of an exported checkpoint."""
    from safetensors.torch import load_file

    return load_file(folder / "model.safetensors")


def test_resume_repeats_the_run_exactly(tmp_path: Path, tiny_model_dir: Path, sft_data: dict[str, Path]) -> None:
    """Six steps straight equal three steps, then three more resumed from their checkpoint: the same losses,
    gradient norms, learning rates (the warm-up spans the resume; the data crosses an epoch) and final
    weights. The validation loss goes down and the run directory has the run's files."""
    straight, run_dir = sft(tmp_path / "a", tiny_model_dir, sft_data, "trainer.total_training_steps=6")
    first, _ = sft(tmp_path / "b", tiny_model_dir, sft_data, "trainer.total_training_steps=3")
    resumed, resumed_dir = sft(tmp_path / "b", tiny_model_dir, sft_data, "trainer.total_training_steps=6")
    assert [row["step"] for row in straight] == [0, 1, 2, 3, 4, 5, 6]
    assert [row["step"] for row in first + resumed] == [0, 1, 2, 3, 4, 5, 6]
    assert json.loads((resumed_dir / "resume.json").read_text())["step"] == 3
    for key in ("train/loss", "train/grad_norm", "train/lr"):
        assert [row[key] for row in straight[1:]] == [row[key] for row in first[1:] + resumed], key
    assert straight[-1]["val/loss"] == resumed[-1]["val/loss"] < straight[0]["val/loss"]
    final_a = weights(tmp_path / "a" / "ckpt" / "global_step_6" / "actor" / "huggingface")
    final_b = weights(tmp_path / "b" / "ckpt" / "global_step_6" / "actor" / "huggingface")
    assert all(torch.equal(final_a[name], final_b[name]) for name in final_a)
    for name in ("config.yaml", "plugins.json", "derived.json", "summary.json", "report/index.html"):
        assert (run_dir / name).is_file(), name
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "completed"


def test_fsdp_and_megatron_give_the_same_loss_curve(
    tmp_path: Path, tiny_model_dir: Path, sft_data: dict[str, Path]
) -> None:
    """The same four steps on the FSDP and on the Megatron engine: train and validation losses within 1e-4
    at every step."""
    curves = {
        strategy: sft(
            tmp_path / strategy,
            tiny_model_dir,
            sft_data,
            f"model.strategy={strategy}",
            "trainer.total_training_steps=4",
            "trainer.test_freq=2",
        )[0]
        for strategy in ("fsdp", "megatron")
    }
    fsdp, megatron = curves["fsdp"], curves["megatron"]
    assert [row["step"] for row in fsdp] == [row["step"] for row in megatron] == [0, 1, 2, 3, 4]
    for a, b in zip(fsdp, megatron):
        for key in ("train/loss", "val/loss"):
            if key in a:
                assert abs(a[key] - b[key]) <= 1e-4, (a["step"], key, a[key], b[key])
    assert fsdp[-1]["train/loss"] < fsdp[1]["train/loss"]


@pytest.fixture(scope="module")
def two_step_sft(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path, sft_data: dict[str, Path]) -> Path:
    """The checkpoint folder of a finished two-step ``rlcore sft`` (read only: a test that changes it copies it)."""
    tmp = tmp_path_factory.mktemp("two-step-sft")
    sft(tmp, tiny_model_dir, sft_data, "trainer.total_training_steps=2")
    return tmp / "ckpt"


def test_the_checkpoint_trains_with_rlcore_run(tmp_path: Path, two_step_sft: Path) -> None:
    """The SFT checkpoint's ``huggingface/`` folder is a model ``rlcore run`` trains (two GRPO steps)."""
    exported = two_step_sft / "global_step_2" / "actor" / "huggingface"
    assert (exported / "tokenizer.json").is_file() and (exported / "config.json").is_file()
    task = make_tiny_task(tmp_path / "task")
    last, _ = tiny_run(tmp_path / "rl", exported, task)
    assert "actor/pg_loss" in last and last["training/global_step"] == 2

    sft_checkpoint = two_step_sft / "global_step_2"  # an SFT checkpoint is never an RL run's step 2
    with pytest.raises(RLCoreError, match=r"cannot be resumed by this run: kind \(sft -> rl\); .*huggingface"):
        tiny_run(
            tmp_path / "resumed",
            exported,
            task,
            "trainer.total_training_steps=4",
            "trainer.resume_mode=resume_path",
            f"trainer.resume_from_path={sft_checkpoint}",
            "trainer.resume_allow_changes=[model,weights,tokenizer,algorithm,data]",
        )


def test_a_fresh_run_after_a_finished_one_moves_its_checkpoints_aside(
    tmp_path: Path, tiny_model_dir: Path, sft_data: dict[str, Path], two_step_sft: Path
) -> None:
    """Repeating a finished ``rlcore sft`` starts afresh, as ``rlcore run`` does: the first run's checkpoint
    moves to ``previous/`` unchanged, and the new one records the new run (the first run's checkpoints are a
    copy of the module's two-step run's)."""
    root = tmp_path / "ckpt"
    shutil.copytree(two_step_sft, root)
    first = weights(root / "global_step_2" / "actor" / "huggingface")
    first_run = json.loads((root / "global_step_2" / RUN_FILE).read_text())["run_id"]
    rows, _ = sft(tmp_path, tiny_model_dir, sft_data, "trainer.total_training_steps=2", "optim.lr=3e-3")
    assert [row["step"] for row in rows] == [0, 1, 2], "a fresh run, not a resume"
    (aside,) = (root / "previous").iterdir()
    moved = weights(aside / "global_step_2" / "actor" / "huggingface")
    assert all(torch.equal(first[name], moved[name]) for name in first)
    second = weights(root / "global_step_2" / "actor" / "huggingface")
    assert any(not torch.equal(first[name], second[name]) for name in first)
    assert json.loads((root / "global_step_2" / RUN_FILE).read_text())["run_id"] != first_run


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_finishes_the_step_writes_the_summary_and_saves(
    tmp_path: Path, tiny_model_dir: Path, sft_data: dict[str, Path], signum: int
) -> None:
    """``rlcore sft`` stops as ``rlcore run`` does: the step in progress finishes, ``summary.json`` says
    interrupted by the signal, ``trainer.save_on_signal`` saves the last step, the kept steps and checkpoint
    are printed, exit 143 / 130 (SIGTERM killed it without a summary; SIGINT was summarised as failed)."""
    args = sft_overrides(
        tmp_path, tiny_model_dir, sft_data, "trainer.total_training_steps=400", "trainer.save_on_signal=true"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlcore", "sft", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    trained: list[Path] = []
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not trained and proc.poll() is None:
        trained = [p for p in (tmp_path / "runs").glob("*/*/metrics.jsonl") if "train/loss" in p.read_text()]
        time.sleep(0.3)
    assert trained, proc.communicate()[0]
    proc.send_signal(signum)
    output, _ = proc.communicate(timeout=240)
    assert proc.returncode == 128 + signum, output
    assert "Traceback" not in output
    run_dir = trained[0].parent
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["kind"] == "sft" and summary["status"] == f"interrupted by {signal.Signals(signum).name}"
    steps = [row["step"] for row in read_metrics(run_dir / "metrics.jsonl") if "train/loss" in row]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) < 400
    last = tmp_path / "ckpt" / f"global_step_{steps[-1]}"
    assert (last / "actor" / "huggingface" / "model.safetensors").is_file(), "save_on_signal saved the last step"
    assert f"stopped: the step in progress was finished; steps up to {steps[-1]} are logged" in output
    assert f"newest checkpoint: {last}" in output
