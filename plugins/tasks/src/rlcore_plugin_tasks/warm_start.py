"""What the bundled CPU tasks share: a small model, its supervised warm start, the shipped models, the data.

Each bundled task starts from a model warm-started on a biased teacher. That model ships with rlcore-plugin-tasks, as
package data under ``rlcore_plugin_tasks/data/<task>-base`` (:func:`shipped_model_dir`), so a run never builds it:
:mod:`rlcore_plugin_tasks.build_base` trains it with the code below and writes it there. A task's parquet files are
written once under its own cache folder (:func:`build_task_data`, about a second).
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

#: a batch of teacher sequences: each row's token ids and its loss mask (1 on trained tokens)
MaskedRows = list[tuple[list[int], list[int]]]
#: the folder of the shipped models (package data)
SHIPPED_DIR = Path(__file__).parent / "data"
#: a warm start prints a line every this many seconds (and at its last step)
HEARTBEAT_S = 10.0


def shipped_model_dir(name: str) -> Path:
    """The folder of the shipped starting model ``name`` (``arith-base``, ...), inside the installed package."""
    return SHIPPED_DIR / name


def cpu_task_preset(root: Path, base_model: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """A bundled task's preset: what every bundled CPU task sets — its parquet files under ``root``, its
    shipped model ``base_model``, GRPO on 16 prompts x n=8 with the HF rollout, no weight decay, one CPU thread
    (the small model's operations are too small to share between threads), no tracker, validation every
    5 steps — followed by the task's own ``settings`` (dotted key -> value)."""
    return {
        "data.train_files": str(root / "train.parquet"),
        "data.val_files": str(root / "test.parquet"),
        "data.train_batch_size": 16,
        "actor_rollout_ref.model.path": str(shipped_model_dir(base_model)),
        "actor_rollout_ref.rollout.name": "hf",
        "actor_rollout_ref.rollout.n": 8,
        "actor_rollout_ref.actor.optim.weight_decay": 0.0,
        "algorithm.adv_estimator": "grpo",
        "trainer.device": "cpu",
        "trainer.cpu_threads": 1,
        "trainer.logger": [],
        "trainer.test_freq": 5,
        "trainer.project_name": "rlcore-default",
        **settings,
    }


def question_row(data_source: str, question: str, answer: str, split: str, index: int) -> dict[str, Any]:
    """One verl-schema row of an arithmetic ``question`` (the user's turn) whose right ``answer`` the
    rule-based reward compares with."""
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": question}],
        "ability": "arithmetic",
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {"split": split, "index": index},
    }


def teacher_batches(
    tokenizer: Any,
    questions: list[str],
    teacher: Callable[[int, random.Random], str],
    rng: random.Random,
    batch_size: int,
) -> Callable[[], MaskedRows]:
    """``sample_batch`` for :func:`warm_start`: ``batch_size`` questions drawn with ``rng`` (each the user's turn
    in the chat template), each answered by ``teacher(question index, rng)`` and EOS, loss on the answer."""
    prompt_ids = [
        tokenizer(
            tokenizer.apply_chat_template(
                [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=False
            ),
            add_special_tokens=False,
        )["input_ids"]
        for question in questions
    ]

    def sample_batch() -> MaskedRows:
        rows = []
        for i in [rng.randrange(len(questions)) for _ in range(batch_size)]:
            answer = tokenizer(teacher(i, rng), add_special_tokens=False)["input_ids"]
            answer.append(tokenizer.eos_token_id)
            rows.append((prompt_ids[i] + answer, [0] * len(prompt_ids[i]) + [1] * len(answer)))
        return rows

    return sample_batch


def task_model(tokenizer: Any, *, max_position_embeddings: int, seed: int) -> Any:
    """The bundled tasks' small Qwen2 model (4 layers, width 128), built from config."""
    from rlcore_testkit.tiny import build_model

    return build_model(
        tokenizer,
        hidden_size=128,
        intermediate_size=256,
        num_layers=4,
        num_heads=4,
        num_kv_heads=2,
        max_position_embeddings=max_position_embeddings,
        seed=seed,
    )


class Heartbeat:
    """Prints ``what: step N/M, loss L, T s`` every :data:`HEARTBEAT_S` seconds and at the last step."""

    def __init__(self, what: str, total: int) -> None:
        """Start the clock of a phase of ``total`` steps."""
        self.what = what
        self.total = total
        self.start = self.last = time.perf_counter()

    def step(self, done: int, loss: float) -> None:
        """Report step ``done`` (1-based) when a heartbeat is due."""
        now = time.perf_counter()
        if now - self.last >= HEARTBEAT_S or done == self.total:
            self.last = now
            print(f"{self.what}: step {done}/{self.total}, loss {loss:.3f}, {now - self.start:.0f} s", flush=True)


def warm_start(
    model: Any,
    tokenizer: Any,
    sample_batch: Callable[[], MaskedRows],
    model_dir: Path,
    *,
    name: str,
    steps: int,
    lr: float,
    warmup: int,
    seed: int,
    heartbeat: bool = True,
) -> None:
    """Train ``model`` for ``steps`` AdamW steps on ``sample_batch()``'s rows, loss on the masked-in tokens,
    then save it and ``tokenizer`` to ``model_dir``.

    The learning rate warms up linearly over ``warmup`` steps and decays linearly to 0; gradients are clipped
    to norm 1. Rows are right-padded with the tokenizer's pad token. The model is left in eval mode.
    ``heartbeat`` prints the progress of the warm start of ``name``.
    """
    import torch

    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup) * (1 - s / steps))
    torch.manual_seed(seed)
    beat = Heartbeat(f"warm start of {name}", steps) if heartbeat else None
    pad_token_id = tokenizer.pad_token_id
    model.train()
    for step in range(steps):
        rows = sample_batch()
        width = max(len(ids) for ids, _ in rows)
        input_ids = torch.tensor([ids + [pad_token_id] * (width - len(ids)) for ids, _ in rows])
        loss_mask = torch.tensor([mask + [0] * (width - len(mask)) for _, mask in rows])
        attention = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in rows])
        labels = input_ids.masked_fill(loss_mask == 0, -100)
        loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        if beat is not None:
            beat.step(step + 1, float(loss.detach()))
    model.eval()
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)


def write_parquet(rows: list[dict[str, Any]], path: Path) -> None:
    """Write ``rows`` (one dict per row) as a parquet file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)


def build_task_data(
    root: Path, train_rows: Callable[[], list[dict[str, Any]]], test_rows: Callable[[], list[dict[str, Any]]]
) -> Path:
    """Write ``root/{train,test}.parquet`` unless both are there already; return ``root``.

    Each file is written under a temporary name and renamed into place, so an interrupted write leaves no
    half-written file.
    """
    root.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train.parquet", train_rows), ("test.parquet", test_rows)):
        if not (root / name).exists():
            partial = root / f".{name}.{os.getpid()}.partial"
            write_parquet(rows(), partial)
            partial.replace(root / name)
    return root
