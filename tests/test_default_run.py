"""The README's main command: `rlcore run` with no arguments trains the bundled task and visibly learns.

This runs the real default end to end in a subprocess — from an empty cache (the task's data is written, the
warm-started model is the one rlcore ships), 40 GRPO steps, validation every 5 steps; then 10 steps with the
vLLM rollout engine where vLLM can be imported, and the README's SFT -> RL sequence. The no-argument runs
are the ones the pages' examples show (``command_once`` in ``conftest.py``: once per pytest run).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rlcore.run import run_training
from rlcore.tracking.sinks import read_metrics

VAL_KEY = "val-core/rlcore/arith/reward/mean@1"


def learned(rows: list[dict], steps: int) -> None:
    """The run validated at step 0 and at its last step ``steps``, and the validation reward rose by 0.4."""
    val = [(row["step"], row[VAL_KEY]) for row in rows if row.get(VAL_KEY) is not None]
    assert val[0][0] == 0 and val[-1][0] == steps
    assert val[0][1] < 0.4, "the warm-started model starts mostly wrong"
    assert val[-1][1] >= val[0][1] + 0.4, f"validation reward did not rise: {val}"


def learned_run(ran: Any, steps: int) -> tuple[Path, list[dict]]:
    """The run directory and metric rows of ``ran`` (a ``command_once`` run of the bundled task, ``steps``
    steps), after checking that it trained the bundled task and learned."""
    assert ran.returncode == 0, ran.output[-3000:]
    assert "training the bundled CPU task" in ran.output
    (run_dir,) = (ran.folder / "outputs" / "rlcore-default").glob("arith-grpo-*")
    rows = read_metrics(run_dir / "metrics.jsonl")
    learned(rows, steps)
    return run_dir, rows


def greedy_accuracy(model_dir: Path, cache: Path) -> float:
    """The share of the bundled task's validation prompts that the Hugging Face model in ``model_dir`` (loaded
    with ``transformers`` alone, as the README shows) answers right by greedy decoding."""
    import pyarrow.parquet as pq
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    (val_file,) = cache.glob("arith-*/test.parquet")
    rows = pq.read_table(val_file).to_pylist()
    right = 0
    with torch.no_grad():
        for row in rows:
            ids = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, return_tensors="pt")
            out = model.generate(**ids, max_new_tokens=4, do_sample=False)
            answer = tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
            right += answer.strip() == row["reward_model"]["ground_truth"]
    return right / len(rows)


def test_rlcore_run_without_arguments_learns(command_once: Any) -> None:
    """The run learns, draws its report, and leaves the trained policy in ``<run directory>/model``: a few MB
    in Hugging Face format, named by the summary, that ``transformers`` loads and that answers the validation
    prompts as well as the run's last validation said. (The run is the one the README's example shows:
    ``command_once`` runs it once for both tests.)"""
    ran = command_once("rlcore run")
    run_dir, rows = learned_run(ran, 40)
    assert (run_dir / "reward_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (run_dir / "report" / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert 'src="panels/reward.png"' in (run_dir / "report" / "index.html").read_text()
    lines = ran.output.splitlines()
    for line in ("val-core/rlcore/arith/reward/mean@1:", "wall time:", "report:", "reward curve:"):
        assert any(text.startswith(line) for text in lines), line
    model = run_dir / "model"
    assert f"model:         {model.relative_to(ran.folder)} (Hugging Face format)" in lines
    assert sum(path.stat().st_size for path in model.iterdir()) < 5_000_000
    final = [row[VAL_KEY] for row in rows if row.get(VAL_KEY) is not None][-1]
    assert greedy_accuracy(model, ran.folder / "cache") >= final - 0.05


def test_default_run_with_the_vllm_engine_learns(command_once: Any) -> None:
    """The same run with ``rollout.name=vllm``, shortened to 10 steps (the default run's validation reward is
    above 0.9 from step 5 on): it learns as much, and every sync passes the log-prob parity probe."""
    if subprocess.run([sys.executable, "-c", "import vllm"], capture_output=True, timeout=300).returncode:
        pytest.skip("vllm cannot be imported here (install rlcore-plugin-vllm[cpu])")
    steps = 10
    _, rows = learned_run(
        command_once(f"rlcore run actor_rollout_ref.rollout.name=vllm trainer.total_training_steps={steps}"), steps
    )
    diffs = [row["rollout/weight_sync_logprob_diff"] for row in rows if row["step"] > 0]
    assert len(diffs) == steps and max(diffs) < 1e-3


def test_sft_on_the_bundled_task_raises_greedy_accuracy(
    tmp_path: Path, command_once: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``rlcore sft`` with no arguments (the run docs/sft.md shows: ``command_once`` runs it once for both)
    lowers the validation loss and raises the greedy validation accuracy of the task's warm-started model,
    measured by ``rlcore run`` itself on the checkpoint's ``huggingface/``."""
    ran = command_once("rlcore sft")
    assert ran.returncode == 0, ran.output[-3000:]
    (run_dir,) = (ran.folder / "outputs" / "rlcore-default").glob("arith-sft-*")
    losses = [row["val/loss"] for row in read_metrics(run_dir / "metrics.jsonl") if "val/loss" in row]
    assert losses[-1] < losses[0] - 0.1, losses
    model = ran.folder / "checkpoints" / "rlcore-default" / "arith-sft" / "global_step_30" / "actor" / "huggingface"
    monkeypatch.setenv("RLCORE_CACHE", str(ran.folder / "cache"))
    validate = [
        "trainer.progress_bar=false",
        f"trainer.runs_dir={tmp_path / 'runs'}",
        "trainer.val_only=true",
        f"trainer.default_local_dir={tmp_path / 'rl'}",
    ]
    before = run_training([], validate, [])[VAL_KEY]
    after = run_training([], [*validate, f"actor_rollout_ref.model.path={model}"], [])[VAL_KEY]
    assert before < 0.4 and after >= before + 0.4, (before, after)
