"""Fixtures of the on-policy distillation tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session", name="teacher_dir")
def teacher_dir_fixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny teacher: the student's architecture and tokenizer, other weights (seed 1)."""
    from rlcore_testkit.tiny import make_tiny_model_dir

    path = tmp_path_factory.mktemp("teacher") / "model"
    make_tiny_model_dir(path, seed=1)
    return path


@pytest.fixture(scope="session", name="padded_teacher_dir")
def padded_teacher_dir_fixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny teacher sharing the student's tokenizer whose vocabulary is padded 256 ids past the student's
    (as Qwen's 151936 rows are past a 151669-id student): the padding rows repeat the first 256 rows of its
    (tied) embedding, so that padding ids share its top-k with real ones (a teacher whose padding was never
    trained may put them there)."""
    import torch
    from rlcore_testkit.tiny import build_model, build_tokenizer

    path = tmp_path_factory.mktemp("padded-teacher") / "model"
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, seed=1)
    rows = model.config.vocab_size
    model.resize_token_embeddings(rows + 256, mean_resizing=False)
    with torch.no_grad():
        embedding = model.get_input_embeddings().weight
        embedding[rows:] = embedding[:256]
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session", name="short_teacher_dir")
def short_teacher_dir_fixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny teacher sharing the student's tokenizer with fewer output ids than the student (its vocabulary
    cut to the tokenizer's ids, the student's padded to a multiple of 64)."""
    from rlcore_testkit.tiny import build_model, build_tokenizer

    path = tmp_path_factory.mktemp("short-teacher") / "model"
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, seed=1)
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
