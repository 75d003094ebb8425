"""Test helpers for rlcore and its plugins: a tiny model builder, fixtures and per-kind contract suites."""

from rlcore.testing.tiny import build_model, build_tokenizer, make_tiny_model_dir

__all__ = ["build_model", "build_tokenizer", "make_tiny_model_dir"]
