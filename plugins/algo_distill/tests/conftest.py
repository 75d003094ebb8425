"""Fixtures of the on-policy distillation tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session", name="teacher_dir")
def teacher_dir_fixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny teacher: the student's architecture and tokenizer, other weights (seed 1)."""
    from rlcore.testing.tiny import make_tiny_model_dir

    path = tmp_path_factory.mktemp("teacher") / "model"
    make_tiny_model_dir(path, seed=1)
    return path
