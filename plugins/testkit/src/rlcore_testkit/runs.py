"""Run a few real training steps on a tiny task — for end-to-end tests of rlcore and of plugins.

::

    from rlcore_testkit.runs import make_tiny_task, tiny_run

    def test_my_estimator_trains(tmp_path, tiny_model_dir):
        task = make_tiny_task(tmp_path / "task")
        last, run_dir = tiny_run(tmp_path, tiny_model_dir, task, "algorithm.adv_estimator=my_estimator")
        assert "actor/pg_loss" in last

The task is a parquet dataset of short prompts with a custom reward function (the fraction of digits in
the response, plus an optional bonus) that gives a random tiny model a dense, varied signal. Everything is
real: the run goes through ``rlcore run``'s own code path with the local executor.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

REWARD_PY = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0):
    """Fraction of digits in the response (a dense signal a random tiny model can climb), plus a bonus."""
    if not solution_str:
        return 0.0
    return sum(ch.isdigit() for ch in solution_str) / len(solution_str) + bonus
'''

DATA_SOURCE = "tiny/digits"


def _rows(n: int, split: str) -> list[dict[str, Any]]:
    return [
        {
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": f"{i}+{i % 7}="}],
            "reward_model": {"style": "rule", "ground_truth": str(i + i % 7)},
            "extra_info": {"split": split, "index": i},
        }
        for i in range(n)
    ]


def make_tiny_task(root: Path, train_rows: int = 24, test_rows: int = 6, caps: Sequence[int] = ()) -> dict[str, Path]:
    """Write ``train.parquet``, ``test.parquet`` and ``reward.py`` under ``root``; return their paths. ``caps``:
    per-row response caps for the training rows by batch of 4 (:func:`cap_responses`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(_rows(train_rows, "train")), root / "train.parquet")
    pq.write_table(pa.Table.from_pylist(_rows(test_rows, "test")), root / "test.parquet")
    (root / "reward.py").write_text(REWARD_PY)
    if caps:
        cap_responses(root / "train.parquet", caps)
    return {"train": root / "train.parquet", "test": root / "test.parquet", "reward": root / "reward.py"}


#: the prefixes of the metrics that measure time, speed or overlap, not what was trained
VOLATILE_METRICS = (
    "timing_s/",
    "timing_worker_s/",
    "timing_per_token_ms/",
    "perf/",
    "actor/weight_sync_s",
    "actor/weight_export_s",
    "async_training/overlap_share",
)


def comparable(rows: list[dict[str, Any]], drop: tuple[str, ...] = ()) -> dict[int, dict[str, Any]]:
    """The metric records ``rows`` (``rlcore.tracking.sinks.read_metrics``) by step, without the
    :data:`VOLATILE_METRICS` and the ``drop`` prefixes: what two runs that trained the same agree on."""
    skip = VOLATILE_METRICS + drop
    return {row["step"]: {k: v for k, v in row.items() if not k.startswith(skip)} for row in rows}


def cap_responses(train: Path, caps: Sequence[int], batch: int = 4, rest: int = 2) -> None:
    """Give the rows of the parquet file ``train`` per-row response caps (``extra_info.max_new_tokens``) by batch
    of ``batch`` rows in file order: ``caps[i]`` for batch ``i``, ``rest`` after the last."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = pq.read_table(train).to_pylist()
    for i, row in enumerate(rows):
        cap = caps[i // batch] if i // batch < len(caps) else rest
        row["extra_info"] = {**row["extra_info"], "max_new_tokens": cap}
    pq.write_table(pa.Table.from_pylist(rows), train)


def teacher_forced(model_dir: Path, rows: Any, tokens: int) -> Any:
    """The log-probs (temperature 1) of each row's first ``tokens`` response tokens (``rows``: a batch with
    ``prompts``, ``attention_mask`` and ``responses``) under the model in ``model_dir``, recomputed row by row
    without padding; a [rows, tokens] tensor."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    out = []
    with torch.no_grad():
        for prompt, mask, response in zip(rows["prompts"], rows["attention_mask"], rows["responses"]):
            ids = torch.cat([prompt[mask[: len(prompt)].bool()], response[:tokens]])
            logits = model(ids[None]).logits[0, -tokens - 1 : -1].float()
            out.append(torch.log_softmax(logits, -1).gather(-1, response[:tokens, None]).squeeze(-1))
    return torch.stack(out)


def tiny_overrides(tmp_path: Path, model_dir: Path, task: dict[str, Path]) -> list[str]:
    """The base overrides of :func:`tiny_run`: 4 prompts x 4 responses, 8-token responses, 2 steps, and no report
    at the end (``trainer.report=false``: a test that checks it adds ``trainer.report=true``)."""
    return [
        f"data.train_files={task['train']}",
        f"data.val_files={task['test']}",
        f"actor_rollout_ref.model.path={model_dir}",
        f"custom_reward_function.path={task['reward']}",
        "data.train_batch_size=4",
        "data.max_prompt_length=32",
        "data.max_response_length=8",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "trainer.total_training_steps=2",
        "trainer.test_freq=1",
        "trainer.device=cpu",
        "trainer.progress_bar=false",
        "trainer.report=false",
        f"trainer.runs_dir={tmp_path / 'runs'}",
        f"trainer.default_local_dir={tmp_path / 'ckpt'}",
    ]


def dry_run(*args: str) -> Any:
    """``rlcore run --dry-run`` with ``args`` (``key=value`` overrides, ``--preset`` ...) through click's test
    runner in this process; its ``Result`` has ``exit_code`` and ``output``."""
    from click.testing import CliRunner

    from rlcore.api import cli

    return CliRunner().invoke(cli, ["run", "--dry-run", *args])


def tiny_run(
    tmp_path: Path, model_dir: Path, task: dict[str, Path], *extra: str, presets: tuple[str, ...] = ()
) -> tuple[dict[str, Any], Path]:
    """Run the tiny task (two steps unless ``extra`` says otherwise); return the last metrics and the run dir.

    ``extra`` are ``key=value`` overrides applied after the base ones; ``presets`` are applied first.
    Each call needs its own ``tmp_path`` (the run directory is found there).
    """
    from rlcore.api import run_training

    last = run_training([], [*tiny_overrides(tmp_path, model_dir, task), *extra], list(presets))
    (run_dir,) = (tmp_path / "runs").glob("*/*")
    return last, run_dir
