"""What the bundled CPU tasks share: a small model, its supervised warm start, and the cached assets.

A bundled task (the arithmetic task, the calculator-tool task) caches two parquet files and a warm-started
model under its own cache folder; each task supplies only its rows and its teacher's batches.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

#: a batch of teacher sequences: each row's token ids and its loss mask (1 on trained tokens)
MaskedRows = list[tuple[list[int], list[int]]]


def task_model(tokenizer: Any, *, max_position_embeddings: int, seed: int) -> Any:
    """The bundled tasks' small Qwen2 model (4 layers, width 128), built from config."""
    from rlcore.testing.tiny import build_model

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


def train_on_masked_rows(
    model: Any,
    pad_token_id: int,
    sample_batch: Callable[[], MaskedRows],
    *,
    steps: int,
    lr: float,
    warmup: int,
    seed: int,
) -> None:
    """Train ``model`` for ``steps`` AdamW steps on ``sample_batch()``'s rows, loss on the masked-in tokens.

    The learning rate warms up linearly over ``warmup`` steps and decays linearly to 0; gradients are clipped
    to norm 1. Rows are right-padded with ``pad_token_id``. The model is left in eval mode.
    """
    import torch

    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup) * (1 - s / steps))
    torch.manual_seed(seed)
    model.train()
    for _ in range(steps):
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
    model.eval()


def write_parquet(rows: list[dict[str, Any]], path: Path) -> None:
    """Write ``rows`` (one dict per row) as a parquet file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)


def build_task_assets(
    root: Path,
    train_rows: Callable[[], list[dict[str, Any]]],
    test_rows: Callable[[], list[dict[str, Any]]],
    warm_start: Callable[[Path], None],
    announcement: str,
) -> Path:
    """Write ``root/{train,test}.parquet`` and ``root/base-model`` (by ``warm_start``) unless cached; return ``root``.

    The model is built in a temporary folder and renamed into place, so an interrupted build leaves no
    half-written ``base-model``; ``announcement`` is printed before a build.
    """
    root.mkdir(parents=True, exist_ok=True)
    if not (root / "train.parquet").exists() or not (root / "test.parquet").exists():
        write_parquet(train_rows(), root / "train.parquet")
        write_parquet(test_rows(), root / "test.parquet")
    model_dir = root / "base-model"
    if not (model_dir / "config.json").exists():
        import shutil
        import tempfile

        print(announcement.format(model_dir=model_dir), flush=True)
        tmp = Path(tempfile.mkdtemp(prefix="base-model-", dir=root))
        warm_start(tmp)
        shutil.rmtree(model_dir, ignore_errors=True)
        tmp.rename(model_dir)
    return root
