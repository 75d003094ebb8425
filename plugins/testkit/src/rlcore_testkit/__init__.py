"""rlcore's test kit (the ``rlcore-testkit`` distribution): the pytest fixtures (entry point ``pytest11``), tiny
models, seed and run helpers, and the per-kind contract suites (:mod:`rlcore_testkit.contracts`)."""

from rlcore_testkit.tiny import build_model, build_tokenizer, make_tiny_model_dir

__version__ = "0.1.0"
__all__ = ["build_model", "build_tokenizer", "make_tiny_model_dir"]
